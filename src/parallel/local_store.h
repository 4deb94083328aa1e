// The store of a single process: full parameters and gradients in two flat
// buffers; acquiring a unit is taking a pointer into them.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "parallel/store.h"

namespace mt {

class LocalStore : public ParamStore {
 public:
  explicit LocalStore(std::vector<UnitSpec> units);

  const float* acquire_params(int unit, Pass) override { return params_.data() + unit_begin(unit); }
  void release_params(int, Pass) override {}
  std::span<const float> resident_params() const override {
    return {params_.data(), static_cast<size_t>(params_.numel())};
  }
  float* acquire_grads(int unit) override { return grads_.data() + unit_begin(unit); }
  void release_grads(int) override {}

  void begin_step(int64_t) override { grads_.zero(); }
  void begin_microbatch(int64_t, int64_t) override {}
  void finish_grads() override {}
  double grad_sum_squares() override;
  void grad_sum_squares_exact(ExactSum& acc) override;
  float* local_grad_of(const std::string& name, int64_t* n) override;
  float* local_param_of(const std::string& name, int64_t* n) override;
  float* local_params() override { return params_.data(); }
  float* local_grads() override { return grads_.data(); }
  int64_t local_numel() const override { return params_.numel(); }
  std::vector<DecayRange> local_decay_ranges() const override;
  void after_update() override {}
  void add_reduced_grads(int unit, const float* full) override;
  void gather_full_params(float* out) override;
  void scatter_full_params(const float* full) override;
  void init_params(const ParamFill& fill) override;

 private:
  int64_t unit_begin(int unit) const { return units_[static_cast<size_t>(unit)].begin; }

  std::vector<UnitSpec> units_;
  Tensor params_, grads_;
};

// Decay ranges of the full flat buffer: one range per run of parameters with
// the same decay flag, in order.
std::vector<DecayRange> full_decay_ranges(const std::vector<UnitSpec>& units);

}  // namespace mt
