#include "train/checkpoint_schedule.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <type_traits>

#include "common/errors.h"

namespace mtrain::train {

using json = nlohmann::json;

ParamSchedule param_schedule(const config::Args& a) {
  ParamSchedule p;
  optim::LrScheduleConfig& s = p.lr;
  s.lr = a.lr.value();
  s.min_lr = a.min_lr;
  s.lr_warmup_init = a.lr_warmup_init;
  s.warmup_iters = a.lr_warmup_iters;
  s.warmup_fraction = a.lr_warmup_fraction;
  s.decay_iters = a.lr_decay_iters.value_or(a.train_iters.value());
  s.style = a.lr_decay_style;
  s.wsd_decay_iters = a.lr_wsd_decay_iters.value_or(0);
  s.wsd_decay_style = a.lr_wsd_decay_style;
  s.samples_per_iteration = a.global_batch_size;
  p.weight_decay = a.weight_decay;
  p.train_iters = a.train_iters.value();
  return p;
}

json param_schedule_to_json(const ParamSchedule& p) {
  const optim::LrScheduleConfig& s = p.lr;
  return {{"lr", s.lr},
          {"min_lr", s.min_lr},
          {"lr_warmup_init", s.lr_warmup_init},
          {"lr_warmup_iters", s.warmup_iters},
          {"lr_warmup_fraction", s.warmup_fraction ? json(*s.warmup_fraction) : json(nullptr)},
          {"lr_decay_iters", s.decay_iters},
          {"lr_decay_style", s.style},
          {"lr_wsd_decay_iters", s.wsd_decay_iters},
          {"lr_wsd_decay_style", s.wsd_decay_style},
          {"global_batch_size", s.samples_per_iteration},
          {"weight_decay", p.weight_decay},
          {"train_iters", p.train_iters}};
}

ScheduleChoice schedule_choice(const config::Args& a) {
  if (a.override_opt_param_scheduler) return ScheduleChoice::kOverride;
  if (a.use_checkpoint_opt_param_scheduler) return ScheduleChoice::kUseCheckpoint;
  return ScheduleChoice::kCheck;
}

namespace {

[[noreturn]] void damaged(const std::string& where, const char* key) {
  throw CheckpointError(fmt::format("{}: \"opt_param_scheduler\".\"{}\" of the checkpoint state is missing or of the "
                                    "wrong type",
                                    where, key),
                        "the checkpoint is damaged; load an older one with --ckpt_step");
}

template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) damaged(where, key);
  const json& v = j.at(key);
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) damaged(where, key);
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) damaged(where, key);
  } else {
    if (!v.is_number()) damaged(where, key);
  }
  return v.get<T>();
}

ParamSchedule from_json(const json& j, const std::string& where) {
  if (!j.is_object()) damaged(where, "(record)");
  ParamSchedule p;
  optim::LrScheduleConfig& s = p.lr;
  s.lr = field<double>(j, "lr", where);
  s.min_lr = field<double>(j, "min_lr", where);
  s.lr_warmup_init = field<double>(j, "lr_warmup_init", where);
  s.warmup_iters = field<int64_t>(j, "lr_warmup_iters", where);
  if (!j.contains("lr_warmup_fraction")) damaged(where, "lr_warmup_fraction");
  if (!j.at("lr_warmup_fraction").is_null()) s.warmup_fraction = field<double>(j, "lr_warmup_fraction", where);
  s.decay_iters = field<int64_t>(j, "lr_decay_iters", where);
  s.style = field<std::string>(j, "lr_decay_style", where);
  s.wsd_decay_iters = field<int64_t>(j, "lr_wsd_decay_iters", where);
  s.wsd_decay_style = field<std::string>(j, "lr_wsd_decay_style", where);
  s.samples_per_iteration = field<int64_t>(j, "global_batch_size", where);
  p.weight_decay = field<double>(j, "weight_decay", where);
  p.train_iters = field<int64_t>(j, "train_iters", where);
  return p;
}

// One compared value under Megatron's printed name, in Megatron's units.
struct Field {
  const char* name;
  json value;
};

std::vector<Field> fields(const ParamSchedule& p) {
  const optim::LrScheduleConfig& s = p.lr;
  const int64_t spi = s.samples_per_iteration;
  // lr_warmup_steps as Megatron computes it: a float from a fraction.
  const json warmup = s.warmup_fraction ? json(*s.warmup_fraction * static_cast<double>(s.decay_iters * spi))
                                        : json(s.warmup_iters * spi);
  return {{"learning rate", s.lr},
          {"minimum learning rate", s.min_lr},
          {"warmup iterations", warmup},
          {"total number of iterations", s.decay_iters * spi},
          {"learning rate decay style", s.style},
          {"start weight decay", p.weight_decay},
          {"end weight decay", p.weight_decay},
          {"total number of weight decay iterations", p.train_iters * spi},
          {"weight decay incr style", "constant"},
          // mtrain's additions: not in Megatron's state dict, but they shape the curve too.
          {"initial warmup learning rate", s.lr_warmup_init},
          {"WSD decay iterations", s.wsd_decay_iters * spi},
          {"WSD decay style", s.wsd_decay_style}};
}

// A value as Python prints it in Megatron's messages (floats keep a ".0").
std::string text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number_float()) return v.dump();
  std::string s = fmt::format("{}", v.get<double>());
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

ScheduleResolution resolve_param_schedule(const json* saved, const ParamSchedule& mine, ScheduleChoice choice,
                                          const std::string& where) {
  ScheduleResolution out{mine, {}};
  const std::vector<Field> cls = fields(mine);
  if (choice == ScheduleChoice::kOverride) {
    for (const Field& f : cls) out.lines.push_back(fmt::format(" > overriding {} value to {}", f.name, text(f.value)));
    return out;
  }
  if (!saved || saved->is_null())
    throw CheckpointError(fmt::format("{}: the checkpoint records no learning-rate schedule (saved by an mtrain "
                                      "older than this check), so a changed schedule cannot be detected",
                                      where),
                          "pass --override_opt_param_scheduler to resume with this run's schedule flags (the ones "
                          "it was saved with, to continue it unchanged), or --no_load_optim to restart the "
                          "optimizer and schedule");
  const ParamSchedule theirs = from_json(*saved, where);
  const std::vector<Field> sd = fields(theirs);
  std::vector<std::string> differ;
  for (size_t i = 0; i < cls.size(); ++i) {
    if (choice == ScheduleChoice::kCheck && cls[i].value != sd[i].value)
      differ.push_back(
          fmt::format("OptimizerParamScheduler: class input value {} and checkpoint value {} for {} "
                      "do not match",
                      text(cls[i].value), text(sd[i].value), cls[i].name));
    out.lines.push_back(fmt::format(" > using checkpoint value {} for {}", text(sd[i].value), sd[i].name));
  }
  if (!differ.empty())
    throw CheckpointError(fmt::format("{}: {}", where, fmt::join(differ, "\n  ")),
                          "the schedule flags (--train_iters, --lr_decay_iters, --lr, --min_lr, warmup, "
                          "--lr_decay_style, --weight_decay, --global_batch_size) differ from the saved run's: pass "
                          "--override_opt_param_scheduler to use this run's values from the checkpoint's iteration "
                          "on, or --use_checkpoint_opt_param_scheduler to keep the checkpoint's");
  out.schedule = theirs;
  return out;
}

}  // namespace mtrain::train
