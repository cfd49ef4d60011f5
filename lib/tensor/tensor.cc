#include "tensor/tensor.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/errors.h"
#include "profiler/kernel_region.h"

namespace mtrain {

int dtype_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
  }
  return "?";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

int64_t host_available_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f)) {
    long long v = 0;
    if (std::sscanf(line, "MemAvailable: %lld kB", &v) == 1) {
      kb = v;
      break;
    }
  }
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

void Tensor::FreeDeleter::operator()(float* p) const { std::free(p); }

Tensor::Tensor(device::Device& dev, Shape shape, DType dtype, device::MemCategory category, std::string name, bool meta,
               int64_t charged_numel)
    : shape_(std::move(shape)), dtype_(dtype), category_(category), name_(std::move(name)) {
  numel_ = shape_numel(shape_);
  charged_ = charged_numel < 0 ? numel_ : std::min(charged_numel, numel_);
  dev.allocate(device_bytes(), category_, name_, host_bytes());
  dev.add_contingent((numel_ - charged_) * dtype_bytes(dtype_));
  device_ = &dev;
  if (!meta && numel_ > 0) {
    const size_t bytes = static_cast<size_t>(host_bytes());
    // Linux overcommits: a too-large allocation "succeeds" and the kernel
    // kills the process when the pages are touched. Check big buffers
    // against the memory actually available first.
    const int64_t available = bytes >= (16u << 20) ? host_available_bytes() : -1;
    void* p = available >= 0 && static_cast<int64_t>(bytes) > available ? nullptr : std::aligned_alloc(64, bytes);
    if (!p) {
      reset();
      throw OutOfMemoryError(
          "host out of memory: " + std::to_string(bytes >> 20) + " MiB for " + name_ +
              (available >= 0 ? " but only " + std::to_string(available >> 20) + " MiB are available" : ""),
          "the simulated NPU has room, but this machine's RAM does not hold the real fp32 tensors; "
          "train a smaller model here, or plan the job shape-only with --dry_run (memory per device and the host "
          "RAM a real run needs, nothing allocated on the host)");
    }
    std::memset(p, 0, bytes);
    data_.reset(static_cast<float*>(p));
  }
}

Tensor::~Tensor() { reset(); }

void Tensor::reset() {
  if (device_) {
    device_->release(device_bytes(), category_, name_, host_bytes());
    device_->add_contingent(-(numel_ - charged_) * dtype_bytes(dtype_));
  }
  device_ = nullptr;
  data_.reset();
}

Tensor::Tensor(Tensor&& o) noexcept { *this = std::move(o); }

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = o.device_;
    shape_ = std::move(o.shape_);
    numel_ = o.numel_;
    charged_ = o.charged_;
    dtype_ = o.dtype_;
    category_ = o.category_;
    name_ = std::move(o.name_);
    data_ = std::move(o.data_);
    o.device_ = nullptr;
    o.numel_ = 0;
    o.charged_ = 0;
  }
  return *this;
}

void Tensor::zero() {
  if (data_) zero_floats(data_.get(), numel_);
}

void zero_floats(float* x, int64_t n) {
  if (profiler::shape_only()) return;           // a dry run's step: no data
  constexpr int64_t kChunk = int64_t{1} << 20;  // floats (4 MiB) per task
  const int64_t nchunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (nchunks > 1)
  for (int64_t c = 0; c < nchunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    std::memset(x + begin, 0, static_cast<size_t>(end - begin) * sizeof(float));
  }
}

}  // namespace mtrain
