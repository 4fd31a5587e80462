// Learning-rate schedules: lr as a pure function of the step number.
//
// Steps are 1-based: lr_at(s) is the rate for the s-th update, so a loop sets
// opt.set_lr(schedule.lr_at(opt.step_count() + 1)) before opt.step().
// lr_at throws gpipe::Error for s < 1.
//
// Schedules and their CLI specs (base = the --lr value):
//   constant                          base
//   inverse_sqrt:warmup=W             base * min(s / W, sqrt(W / s))
//                                     linear warm-up to base at s = W, then
//                                     decay as 1/sqrt(s) (peak = base)
//   noam:d_model=D,warmup=W           base * D^-0.5 * min(s^-0.5, s * W^-1.5)
//                                     "Attention Is All You Need" (base is the
//                                     paper's scale factor, usually 1 or 2)
//   cosine:total=T[,warmup=W][,floor=F]
//                                     base * s / W for s <= W, then
//                                     F + (base - F) * (1 + cos(pi * (s - W) / (T - W))) / 2
//                                     up to s = T, F after; F is an absolute
//                                     rate in [0, base]; W defaults to 0, F to 0
//   step:every=K[,gamma=G]            base * G^floor((s - 1) / K); G defaults to 0.1
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace gpipe::optim {

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // The learning rate of update `step` (1-based).
  virtual double lr_at(int64_t step) const = 0;
  // The spec that parse_lr_schedule turns back into this schedule.
  virtual std::string str() const = 0;
};

class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double base);
  double lr_at(int64_t step) const override;
  std::string str() const override;

 private:
  double base_;
};

class InverseSqrtLr : public LrSchedule {
 public:
  InverseSqrtLr(double base, int64_t warmup);  // warmup >= 1
  double lr_at(int64_t step) const override;
  std::string str() const override;

 private:
  double base_;
  int64_t warmup_;
};

class NoamLr : public LrSchedule {
 public:
  NoamLr(double base, int64_t d_model, int64_t warmup);  // d_model >= 1, warmup >= 1
  double lr_at(int64_t step) const override;
  std::string str() const override;

 private:
  double base_;
  int64_t d_model_, warmup_;
};

class CosineLr : public LrSchedule {
 public:
  CosineLr(double base, int64_t warmup, int64_t total, double floor);  // 0 <= warmup < total
  double lr_at(int64_t step) const override;
  std::string str() const override;

 private:
  double base_;
  int64_t warmup_, total_;
  double floor_;
};

class StepLr : public LrSchedule {
 public:
  StepLr(double base, int64_t every, double gamma);  // every >= 1, gamma > 0
  double lr_at(int64_t step) const override;
  std::string str() const override;

 private:
  double base_;
  int64_t every_;
  double gamma_;
};

// Parses a spec (see the table above) into a schedule peaking at `base_lr`.
// Throws gpipe::Error naming the spec for an unknown schedule (listing the
// known ones), an unknown or repeated key (listing the allowed keys), a
// missing required key, or a value that is not a number / not in range.
std::unique_ptr<LrSchedule> parse_lr_schedule(std::string_view spec, double base_lr);

}  // namespace gpipe::optim
