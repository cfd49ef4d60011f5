// The activation category of a rank class broken into the buffers the model
// allocated (the device's live allocations by name, device.h), for the
// report's comparison with Korthikanti et al.'s per-layer formula: what lies
// outside the layers, by name and size.
//
// The model's names say what a buffer is for (lib/model/gpt.cc,
// transformer_layer.cc):
//   "layer slot <i> ..."   a layer's saved activations (every micro-batch slot)
//   "chunk <c> slot <s> ..." one in-flight micro-batch's buffers of a model
//                          chunk; its "residual stream" holds the input of each
//                          layer (counted with the layers) and one more row,
//                          the stage output
//   anything else          one buffer shared by all layers and micro-batches:
//                          the backward workspace, the recompute buffer, the
//                          residual-gradient buffers
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mtrain::plan {

struct NamedBuffer {
  std::string name;   // without the "chunk <c> slot <s> " prefix
  int64_t bytes = 0;  // summed over the slots
  int count = 0;      // slots (micro-batch buffers) or 1
  bool operator==(const NamedBuffer&) const = default;
};

struct ActivationBreakdown {
  int64_t layers = 0;                       // saved layer activations + the residual stream's layer-input rows
  std::vector<NamedBuffer> per_microbatch;  // by name; "stage output (last row of the residual stream)" first
  std::vector<NamedBuffer> shared;          // by name
  int64_t rest() const;                     // per_microbatch + shared
};

// `live`: the activation category's live bytes by name; `residual_row_bytes`:
// one row of a residual stream, (tokens on this rank) x hidden x dtype bytes.
ActivationBreakdown activation_breakdown(const std::map<std::string, int64_t>& live, int64_t residual_row_bytes);

// The report's lines for the rest (indented by `indent`), largest first within each group.
std::string format_activation_rest(const ActivationBreakdown& b, const std::string& indent);

}  // namespace mtrain::plan
