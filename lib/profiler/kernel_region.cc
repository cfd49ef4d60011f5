#include "profiler/kernel_region.h"

namespace mtrain::profiler::detail {
thread_local int t_compute_dtype_bytes = 4;
thread_local bool t_shape_only = false;
}  // namespace mtrain::profiler::detail
