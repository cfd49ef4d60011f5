#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>

#include "common/errors.h"

namespace mtrain {

int dtype_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
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

void Tensor::FreeDeleter::operator()(float* p) const { std::free(p); }

Tensor::Tensor(device::Device& dev, Shape shape, DType dtype, device::MemCategory category, std::string name,
               bool meta)
    : shape_(std::move(shape)), dtype_(dtype), category_(category), name_(std::move(name)) {
  numel_ = shape_numel(shape_);
  dev.allocate(numel_ * dtype_bytes(dtype_), category_, name_);
  device_ = &dev;
  if (!meta && numel_ > 0) {
    size_t bytes = (static_cast<size_t>(numel_) * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) {
      reset();
      throw OutOfMemoryError("host out of memory allocating " + std::to_string(bytes) + " bytes for " + name_,
                             "the simulated device fits, but this machine's RAM does not; use --dry_run to plan");
    }
    std::memset(p, 0, bytes);
    data_.reset(static_cast<float*>(p));
  }
}

Tensor::~Tensor() { reset(); }

void Tensor::reset() {
  if (device_) device_->release(numel_ * dtype_bytes(dtype_), category_);
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
    dtype_ = o.dtype_;
    category_ = o.category_;
    name_ = std::move(o.name_);
    data_ = std::move(o.data_);
    o.device_ = nullptr;
    o.numel_ = 0;
  }
  return *this;
}

void Tensor::zero() {
  if (data_) std::memset(data_.get(), 0, static_cast<size_t>(numel_) * sizeof(float));
}

}  // namespace mtrain
