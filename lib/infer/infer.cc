// `mtrain infer`: load the model, then chat or batch inference (infer.h).
#include "infer/infer.h"

#include <fmt/format.h>

#include "infer/infer_internal.h"

namespace mtrain::infer {

int run_infer(const InferOptions& options, const InferContext& ctx, std::istream& in, std::ostream& out) {
  InferModel m = load_infer_model(options, ctx);
  if (options.load_data_args || !options.val_dataset.empty())
    return run_infer_dataset(options, m, ctx.stdout_is_tty, out);
  return run_infer_chat(options, m, in, out);
}

}  // namespace mtrain::infer
