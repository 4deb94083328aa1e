#include "parallel/local_store.h"

#include <cstring>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "ops/primitives.h"
#include "optim/clip.h"
#include "parallel/store_plan.h"

namespace mt {

void fill_on_device(const ParamStore::ParamFill& fill, const ParamSlot& param, int64_t first, int64_t n,
                    float* out) {
  if (device_of(out) == kHost) return fill(param, first, n, out);
  std::vector<float> host(static_cast<size_t>(n));
  fill(param, first, n, host.data());
  copy_from_host(out, host.data(), n * int64_t{sizeof(float)}, "init");
}

void ParamStore::add_reduced_grads(int unit, const float*) {
  MT_THROW(Error, "this parameter store cannot add a reduced gradient to unit ", unit);
}

namespace {
[[noreturn]] void no_tied_apart(int unit) {
  MT_THROW(Error, "this parameter store keeps no tied head's gradient apart (unit ", unit, ")");
}
}  // namespace

float* ParamStore::acquire_tied_grads(int unit) {
  no_tied_apart(unit);
}

void ParamStore::release_tied_grads(int unit) {
  no_tied_apart(unit);
}

void LocalStore::add_reduced_grads(int unit, const float* full) {
  add(grads_.data() + unit_begin(unit), full, units_[static_cast<size_t>(unit)].numel());
}

int64_t units_total(const std::vector<UnitSpec>& units) {
  return units.empty() ? 0 : units.back().end;
}

double counted_sum_squares(const std::vector<UnitSpec>& units, const float* full) {
  double s = 0.0;
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (p.norm_counted) s += sum_squares(full + p.offset, p.numel());
    }
  }
  return s;
}

void counted_sum_squares_exact(const std::vector<UnitSpec>& units, const float* full, ExactSum& acc) {
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (p.norm_counted) exact_sum_squares(acc, full + p.offset, p.numel());
    }
  }
}

std::vector<DecayRange> full_decay_ranges(const std::vector<UnitSpec>& units) {
  std::vector<DecayRange> r;
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (!r.empty() && r.back().decay == p.decay && r.back().offset + r.back().numel == p.offset) {
        r.back().numel += p.numel();
      } else {
        r.push_back({p.offset, p.numel(), p.decay});
      }
    }
  }
  return r;
}

LocalStore::LocalStore(std::vector<UnitSpec> units)
    : units_(std::move(units)),
      params_(store_plan(units_, StoreShape{}).make("params")),
      grads_(store_plan(units_, StoreShape{}).make("grads")) {
  int64_t at = 0;
  for (const auto& u : units_) {
    MT_CHECK(u.begin == at, "units must tile the parameter buffer in order");
    at = u.end;
  }
}

const ParamSlot& find_slot(const std::vector<UnitSpec>& units, const std::string& name) {
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (p.name == name) return p;
    }
  }
  MT_THROW(Error, "no parameter named '", name, "' in this store");
}

float* LocalStore::local_grad_of(const std::string& name, int64_t* n) {
  const ParamSlot& p = find_slot(units_, name);
  *n = p.numel();
  return grads_.data() + p.offset;
}

float* LocalStore::local_param_of(const std::string& name, int64_t* n) {
  const ParamSlot& p = find_slot(units_, name);
  *n = p.numel();
  return params_.data() + p.offset;
}

double LocalStore::grad_sum_squares() {
  return counted_sum_squares(units_, grads_.data());
}

void LocalStore::grad_sum_squares_exact(ExactSum& acc) {
  counted_sum_squares_exact(units_, grads_.data(), acc);
}

std::vector<DecayRange> LocalStore::local_decay_ranges() const {
  return full_decay_ranges(units_);
}

void LocalStore::gather_full_params(float* out) {
  copy_to_host(out, params_.data(), params_.nbytes(), "checkpoint");
}

void LocalStore::scatter_full_params(const float* full) {
  copy_from_host(params_.data(), full, params_.nbytes(), "checkpoint");
}

void LocalStore::init_params(const ParamFill& fill) {
  for (const auto& u : units_) {
    for (const auto& p : u.params)
      fill_on_device(fill, p, 0, p.numel(), params_.data() + p.offset);
  }
}

}  // namespace mt
