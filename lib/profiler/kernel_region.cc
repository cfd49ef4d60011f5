#include "profiler/kernel_region.h"

namespace mtrain::profiler::detail {
thread_local int t_compute_dtype_bytes = 4;
}
