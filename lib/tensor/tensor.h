// Tensor: a shape, an emulated dtype, a device and either fp32 host storage or
// nothing at all (a "meta" tensor, for shape-only planning). Allocation goes
// through the Device, which accounts the dtype's bytes by category; the
// destructor gives them back. Tensors are move-only owners.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"

namespace mtrain {

// The dtype a tensor would have on the NPU. Host storage is fp32 regardless;
// bf16/fp16 values are kept exactly representable by rounding (precision.h).
enum class DType { kF32, kBF16, kF16 };
int dtype_bytes(DType t);
const char* dtype_name(DType t);

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

// Sets x (n floats) to +0; large n in parallel chunks (one core's store
// bandwidth is well below the machine's).
void zero_floats(float* x, int64_t n);

// MemAvailable from /proc/meminfo in bytes, or -1 if unknown.
int64_t host_available_bytes();

class Tensor {
 public:
  Tensor() = default;
  // meta = true: accounted on the device, but no host storage and data() == nullptr.
  // charged_numel (0 <= it <= numel, -1: numel): the elements the device is
  // charged for; host storage holds all of shape. The rest is the device's
  // contingent (device.h): a buffer sized for a worst case the plan does not
  // expect (MoE expert rows if routing collapses, moe/moe_buffers.cc).
  Tensor(device::Device& dev, Shape shape, DType dtype, device::MemCategory category, std::string name,
         bool meta = false, int64_t charged_numel = -1);
  ~Tensor();
  Tensor(Tensor&& o) noexcept;
  Tensor& operator=(Tensor&& o) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  bool is_meta() const { return device_ != nullptr && !data_; }
  bool defined() const { return device_ != nullptr; }
  const std::string& name() const { return name_; }
  int64_t device_bytes() const { return charged_ * dtype_bytes(dtype_); }
  // The host storage a real (not meta) tensor holds: fp32 in whole 64-byte lines.
  int64_t host_bytes() const { return numel_ > 0 ? (numel_ * static_cast<int64_t>(sizeof(float)) + 63) / 64 * 64 : 0; }
  void zero();  // zero_floats over the whole storage (no-op for meta tensors)

 private:
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  void reset();

  device::Device* device_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
  int64_t charged_ = 0;  // elements charged on the device (<= numel_)
  DType dtype_ = DType::kF32;
  device::MemCategory category_ = device::MemCategory::kOther;
  std::string name_;
  std::unique_ptr<float[], FreeDeleter> data_;
};

}  // namespace mtrain
