#include "observe/logger.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>

#include "common/errors.h"

namespace mtrain::observe {

std::string now_timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// Python's '{:.6E}' (two-digit exponent at least), which fmt matches.
static std::string sci(double v) { return fmt::format("{:.6E}", v); }

// Python's str(float): shortest round-trip digits, always with a '.0' for
// whole numbers (Megatron prints the memory line with plain str()).
static std::string py_float(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string format_log_line(const StepMetrics& m, double avg_loss, double avg_ms, int64_t skipped, int64_t nans,
                            const LogThroughput* throughput, const std::string& ts, const AuxLossAverages& aux) {
  std::string s = fmt::format(" [{}]", ts);
  s += fmt::format(" iteration {:8d}/{:8d} |", m.iteration, m.train_iters);
  s += fmt::format(" consumed samples: {:12d} |", m.consumed_samples);
  s += fmt::format(" elapsed time per iteration (ms): {:.1f} |", avg_ms);
  // Megatron's place for its throughput; the simulated device's figures
  // follow it (sub-millisecond on small models, hence three decimals).
  if (throughput) {
    s += fmt::format(" throughput per GPU (TFLOP/s/GPU): {:.1f} |", throughput->tflops_per_gpu);
    if (throughput->simulated)
      s += fmt::format(
          " simulated device time per iteration (ms): {:.3f} | simulated throughput per GPU (TFLOP/s/GPU): {:.1f} |",
          throughput->simulated_ms, throughput->simulated_tflops_per_gpu);
  }
  s += fmt::format(" learning rate: {} |", sci(m.learning_rate));
  s += fmt::format(" global batch size: {:5d} |", m.global_batch_size);
  if (avg_loss > 0) s += fmt::format(" lm loss: {} |", sci(avg_loss));
  for (const auto& [name, value] : aux)
    if (value > 0) s += fmt::format(" {}: {} |", name, sci(value));
  s += fmt::format(" loss scale: {:.1f} |", m.loss_scale);
  if (m.has_grad_norm) s += fmt::format(" grad norm: {:.3f} |", m.grad_norm);
  if (m.has_num_zeros) s += fmt::format(" num zeros: {} |", m.num_zeros);
  if (m.has_params_norm) s += fmt::format(" params norm: {:.3f} |", m.params_norm);
  s += fmt::format(" number of skipped iterations: {:3d} |", skipped);
  s += fmt::format(" number of nan iterations: {:3d} |", nans);
  return s;
}

std::string format_validation_line(const std::string& prefix, double loss) {
  const double ppl = std::exp(std::min(20.0, loss));
  return fmt::format(" validation loss at {} | lm loss value: {} | lm loss PPL: {} | ", prefix, sci(loss), sci(ppl));
}

MegatronLogger::MegatronLogger(LoggerOptions opts, const device::Device& dev) : opts_(std::move(opts)), dev_(dev) {
  if (!opts_.print_log) opts_.jsonl_path.clear();
  if (!opts_.jsonl_path.empty()) {
    jsonl_ = std::fopen(opts_.jsonl_path.c_str(), "a");
    if (!jsonl_)
      throw ConfigError("cannot open " + opts_.jsonl_path + " for writing", "check --output_dir is writable");
  }
}

MegatronLogger::~MegatronLogger() {
  if (jsonl_) std::fclose(jsonl_);
}

void MegatronLogger::on_train_begin(const TrainInfo& info) {
  start_iteration_ = info.start_iteration;
  if (!opts_.print_log) return;
  fmt::print("[after megatron is initialized] datetime: {}\ntraining ...\n", now_timestamp());
  std::fflush(stdout);
}

static std::string hms(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h {}m {}s", s / 3600, s / 60 % 60, s % 60);
  if (s >= 60) return fmt::format("{}m {}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

double tflops_per_gpu(double flops_per_iteration, double seconds_per_iteration, int world_size) {
  return flops_per_iteration / (seconds_per_iteration * 1e12 * world_size);
}

LogThroughput MegatronLogger::throughput(double avg_ms) const {
  LogThroughput t;
  if (!opts_.log_throughput) return t;
  const auto tflops = [&](double seconds) {
    return tflops_per_gpu(opts_.flops_per_iteration, seconds, opts_.world_size);
  };
  t.tflops_per_gpu = tflops(avg_ms / 1000.0);
  if (opts_.simulated_step_seconds) {
    const double s = opts_.simulated_step_seconds();
    t.simulated = true;
    t.simulated_ms = s * 1000.0;
    t.simulated_tflops_per_gpu = tflops(s);
  }
  return t;
}

// The simulated NPU's live bytes by category at the logged step, under
// "memory/<category>" (spaces as '_'): what `mtrain report` plots over time.
static void add_memory_keys(nlohmann::json& j, const device::MemoryStats& st) {
  for (int c = 0; c < static_cast<int>(device::MemCategory::kCount); ++c) {
    std::string name = device::mem_category_name(static_cast<device::MemCategory>(c));
    std::replace(name.begin(), name.end(), ' ', '_');
    j["memory/" + name] = st.by_category[c];
  }
}

void MegatronLogger::accumulate(const StepMetrics& m) {
  ++steps_;
  sum_ms_ += m.elapsed_ms;
  total_ms_ += m.elapsed_ms;
  if (m.skipped) {
    ++skipped_;
  } else {
    sum_loss_ += m.lm_loss;
    ++counted_;
  }
  if (!std::isfinite(m.lm_loss) || !std::isfinite(m.grad_norm)) ++nans_;
  for (const auto& [name, value] : m.aux_losses) {
    auto it = std::find_if(sum_aux_.begin(), sum_aux_.end(), [&](const auto& p) { return p.first == name; });
    if (it == sum_aux_.end()) it = sum_aux_.insert(sum_aux_.end(), {name, 0.0});
    it->second += value;
  }
}

void MegatronLogger::write_jsonl(const StepMetrics& m, double avg_loss, double avg_ms, const LogThroughput* shown) {
  const auto& st = dev_.stats();
  const int64_t done = m.iteration - start_iteration_;
  const double per_it = total_ms_ / 1000.0 / std::max<int64_t>(1, done);
  nlohmann::json j = {
      {"loss", avg_loss},
      {"grad_norm", m.has_grad_norm ? nlohmann::json(m.grad_norm) : nlohmann::json(nullptr)},
      {"learning_rate", m.learning_rate},
      {"iteration", fmt::format("{}/{}", m.iteration, m.train_iters)},
      {"consumed_samples", m.consumed_samples},
      {"global_batch_size", m.global_batch_size},
      {"loss_scale", m.loss_scale},
      {"skipped_iterations", skipped_},
      {"nan_iterations", nans_},
      {"elapsed_time_per_iteration_ms", avg_ms},
      {"elapsed_time", hms(total_ms_ / 1000.0)},
      {"remaining_time", hms(per_it * static_cast<double>(m.train_iters - m.iteration))},
      {"memory(GiB)", st.max_reserved / double(1LL << 30)},
      {"train_speed(s/it)", per_it},
      {"tokens_per_second", m.tokens / (m.elapsed_ms / 1000.0)},
      {"comm_seconds", m.comm.seconds},
      {"comm_bytes", m.comm.bytes},
      {"grad_buckets_overlapped", m.grad_buckets_overlapped},
  };
  add_memory_keys(j, st);
  if (m.has_num_zeros) j["num_zeros"] = m.num_zeros;
  if (m.has_params_norm) j["params_norm"] = m.params_norm;
  for (const auto& [name, value] : m.aux_losses) j[name] = value;
  if (shown) j["throughput_tflops_per_gpu"] = shown->tflops_per_gpu;
  if (shown && shown->simulated) {
    j["simulated_device_time_per_iteration_ms"] = shown->simulated_ms;
    j["simulated_throughput_tflops_per_gpu"] = shown->simulated_tflops_per_gpu;
  }
  std::fprintf(jsonl_, "%s\n", j.dump().c_str());
  std::fflush(jsonl_);
}

void MegatronLogger::on_step_end(const StepMetrics& m) {
  accumulate(m);
  if (m.iteration % opts_.log_interval != 0 && m.iteration != m.train_iters) return;

  const double avg_loss = counted_ ? sum_loss_ / counted_ : 0.0;
  // Megatron divides every total_loss_dict entry by the advanced iterations.
  AuxLossAverages aux = sum_aux_;
  for (auto& entry : aux) entry.second /= static_cast<double>(std::max<int64_t>(1, counted_));
  const double avg_ms = sum_ms_ / steps_;
  const LogThroughput tp = throughput(avg_ms);
  const LogThroughput* shown = opts_.log_throughput ? &tp : nullptr;
  if (opts_.print_log)
    fmt::print("{}\n", format_log_line(m, avg_loss, avg_ms, skipped_, nans_, shown, now_timestamp(), aux));
  const auto& st = dev_.stats();
  constexpr double kMB = 1 << 20;
  if (!memory_reported_ && opts_.print_memory) {
    memory_reported_ = true;
    fmt::print(
        "[Rank {}] (after {} iterations) memory (MB) | allocated: {} | max allocated: {} | reserved: {} | "
        "max reserved: {}\n",
        opts_.rank, m.iteration, py_float(st.allocated / kMB), py_float(st.max_allocated / kMB),
        py_float(st.reserved / kMB), py_float(st.max_reserved / kMB));
  }
  std::fflush(stdout);
  if (jsonl_) write_jsonl(m, avg_loss, avg_ms, shown);
  sum_loss_ = sum_ms_ = 0;
  for (auto& entry : sum_aux_) entry.second = 0;
  steps_ = counted_ = skipped_ = nans_ = 0;
}

void MegatronLogger::on_eval_end(const EvalMetrics& m) {
  if (!opts_.print_log) return;
  const std::string line = format_validation_line(
      fmt::format("iteration {}{}", m.iteration, m.end_of_training ? " on validation set" : ""), m.lm_loss);
  const std::string rule(line.size() + 1, '-');
  fmt::print("{}\n{}\n{}\n", rule, line, rule);
  std::fflush(stdout);
  if (jsonl_) {
    nlohmann::json j = {{"eval_loss", m.lm_loss},
                        {"eval_ppl", std::exp(std::min(20.0, m.lm_loss))},
                        {"iteration", m.iteration},
                        {"end_of_training", m.end_of_training}};
    std::fprintf(jsonl_, "%s\n", j.dump().c_str());
    std::fflush(jsonl_);
  }
}

void MegatronLogger::on_train_end(const TrainInfo&) {
  if (!opts_.print_log) return;
  fmt::print("[after training is done] datetime: {}\n", now_timestamp());
  std::fflush(stdout);
}

}  // namespace mtrain::observe
