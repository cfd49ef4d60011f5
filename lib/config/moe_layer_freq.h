// --moe_layer_freq: which decoder layers are MoE. Megatron accepts an integer
// N (layer i is MoE iff i % N == 0) or a Python list expression of 0/1 per
// layer made of [a,b,...], +, * and parentheses, e.g. "([1]*3+[0]*1)*2"
// (megatron/training/arguments.py: only the characters ,0-9[]()+* are
// allowed). This evaluates that small grammar without Python.
#pragma once

#include <string>
#include <vector>

namespace mtrain::config {

// One 0/1 per layer; throws ConfigError naming --moe_layer_freq for a bad
// expression, a value other than 0/1 or a pattern whose length is not num_layers.
std::vector<int> moe_layer_pattern(const std::string& freq, int num_layers);

}  // namespace mtrain::config
