// DataParallelStore's layout of the local state (parallel/data_parallel.h):
// the parts of each unit's shard, where a parameter lies in it, and the
// whole-model access (gather, scatter, initialisation) used by checkpoints;
// the gradient norm's sum of squares over the local state.
#include <cstring>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "ops/primitives.h"
#include "optim/clip.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_grads.h"
#include "parallel/local_store.h"
#include "parallel/store_plan.h"

namespace mt {

std::vector<DataParallelStore::Part> DataParallelStore::make_parts(const UnitSpec& unit) {
  std::vector<Part> parts;
  int64_t at = 0;
  for (UnitPart& p : unit_parts(unit, P_, replicas())) {  // the store plan's split
    const int64_t n = p.shards.shard_numel();
    parts.push_back(
        {std::move(p.shards), p.expert ? opts_.expert_replicas : shard_, at, p.expert ? " experts" : ""});
    at += n;
  }
  return parts;
}

void DataParallelStore::extract(size_t unit, const float* full, float* shard) const {
  for (const Part& part : parts_[unit])
    part.shards.extract(full, part.group->rank(), shard + part.in_shard);
}

// Where the parameter `name` lies in a local buffer (full for ZeRO 0, this
// rank's shards otherwise), its element count there, and its unit (−1 for ZeRO 0).
int64_t DataParallelStore::local_offset_of(const std::string& name, int64_t* n, int* unit) const {
  *unit = -1;
  if (opts_.zero == 0) {
    const ParamSlot& p = find_slot(units_, name);
    *n = p.numel();
    return p.offset;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const Part& part : parts_[u]) {
      for (const auto& piece : part.shards.pieces()) {
        if (piece.param->name != name) continue;
        *n = piece.shard_rows * piece.param->row_size;  // padding rows are zero on every rank
        *unit = static_cast<int>(u);
        return shard_offset_[u] + part.in_shard + piece.in_shard;
      }
    }
  }
  find_slot(units_, name);  // throws naming `name` when no unit holds it
  MT_THROW(Error, "parameter '", name, "' lies in no shard of its unit");
}

void DataParallelStore::add_reduced_grads(int unit, const float* full) {
  const auto u = static_cast<size_t>(unit);
  if (opts_.zero <= 1) add(full_grads_.data() + units_[u].begin, full, units_[u].numel());
  if (opts_.zero == 0) return;
  if (opts_.zero == 1) {  // the shard again from the full gradient, which the norm reads
    extract(u, full_grads_.data() + units_[u].begin, local_grads_.data() + shard_offset_[u]);
    return;
  }
  float* shard = local_grads_.data() + shard_offset_[u];  // its real rows (padding stays zero)
  for_each_piece(u, [&](const Part& part, const UnitShards::Piece& p) {
    const int64_t K = p.param->row_size;
    const auto [b, e] = part.shards.rows_of(p, part.group->rank());
    if (e > b) add(shard + part.in_shard + p.in_shard, full + p.in_unit + b * K, (e - b) * K);
  });
}

// ZeRO 1 keeps the whole reduced gradient, which the norm reads: the exchange
// sums the whole parameter there, and the shard is cut from it again.
float* DataParallelStore::exchanged_grad_of(const std::string& name, int64_t* n) {
  if (opts_.zero != 1) return local_grad_of(name, n);
  const ParamSlot& p = find_slot(units_, name);
  *n = p.numel();
  return full_grads_.data() + p.offset;
}

void DataParallelStore::after_grad_exchange(const std::string& name) {
  if (opts_.zero != 1) return;
  int unit = 0;
  int64_t n = 0;
  local_offset_of(name, &n, &unit);
  const auto u = static_cast<size_t>(unit);
  extract(u, full_grads_.data() + units_[u].begin, local_grads_.data() + shard_offset_[u]);
}

float* DataParallelStore::local_grad_of(const std::string& name, int64_t* n) {
  int unit = 0;
  const int64_t off = local_offset_of(name, n, &unit);
  return (opts_.zero == 0 ? full_grads_.data() : local_grads_.data()) + off;
}

float* DataParallelStore::local_param_of(const std::string& name, int64_t* n) {
  int unit = 0;
  const int64_t off = local_offset_of(name, n, &unit);
  if (opts_.zero == 0) return full_params_.data() + off;
  if (opts_.zero <= 2) {  // the shard of the unit, copied out of the full parameters (as local_params does)
    const auto u = static_cast<size_t>(unit);
    extract(u, full_params_.data() + units_[u].begin, local_params_.data() + shard_offset_[u]);
  }
  return local_params_.data() + off;
}

float* DataParallelStore::local_params() {
  if (opts_.zero == 0) return full_params_.data();
  if (opts_.zero <= 2) {  // the update works on this rank's shard, copied out of the full parameters
    for (size_t u = 0; u < units_.size(); ++u)
      extract(u, full_params_.data() + units_[u].begin, local_params_.data() + shard_offset_[u]);
  }
  return local_params_.data();
}

float* DataParallelStore::local_grads() {
  return opts_.zero == 0 ? full_grads_.data() : local_grads_.data();
}

std::vector<DecayRange> DataParallelStore::local_decay_ranges() const {
  if (opts_.zero == 0) return full_decay_ranges(units_);
  std::vector<DecayRange> r;
  for (size_t u = 0; u < units_.size(); ++u) {
    for_each_piece(u, [&](const Part& part, const UnitShards::Piece& p) {
      const int64_t off = shard_offset_[u] + part.in_shard + p.in_shard, n = p.shard_rows * p.param->row_size;
      if (!r.empty() && r.back().decay == p.param->decay)
        r.back().numel += n;
      else
        r.push_back({off, n, p.param->decay});
    });
  }
  return r;
}

void DataParallelStore::gather_unit(size_t u, float* full, const std::string& what) {
  for (const Part& part : parts_[u]) {
    const int64_t n = part.shards.shard_numel();
    Tensor packed = take_comm(part.group->size() * n);  // the backward's buffers, reused
    part.group->all_gather(local_params_.data() + shard_offset_[u] + part.in_shard, packed.data(), n,
                           ElemType::f32, units_[u].name + what + part.suffix);
    part.shards.unpack(packed.data(), full);
    give_comm(std::move(packed));
  }
}

void DataParallelStore::after_update() {
  if (opts_.zero == 0 || opts_.zero == 3) return;
  // One all-gather per unit, straight from this rank's updated shard: the
  // communication buffer never exceeds one unit (gathered, unpacked, freed).
  for (size_t u = 0; u < units_.size(); ++u)
    gather_unit(u, full_params_.data() + units_[u].begin, " updated params");
}

void DataParallelStore::gather_full_params(float* out) {
  if (opts_.zero < 3) {
    copy_to_host(out, full_params_.data(), full_params_.nbytes(), "checkpoint");
    return;
  }
  for (size_t u = 0; u < units_.size(); ++u)
    gather_unit(u, out + units_[u].begin, " params (gather for save)");
}

void DataParallelStore::scatter_full_params(const float* full) {
  if (opts_.zero < 3) {
    copy_from_host(full_params_.data(), full, full_params_.nbytes(), "checkpoint");
    return;
  }
  for (size_t u = 0; u < units_.size(); ++u)
    extract(u, full + units_[u].begin, local_params_.data() + shard_offset_[u]);
}

void DataParallelStore::init_params(const ParamFill& fill) {
  if (opts_.zero < 3) {
    for (const auto& u : units_) {
      for (const auto& p : u.params)
        fill_on_device(fill, p, 0, p.numel(), full_params_.data() + p.offset);
    }
    return;
  }
  local_params_.zero();
  for (size_t u = 0; u < units_.size(); ++u) {
    for_each_piece(u, [&](const Part& part, const UnitShards::Piece& p) {  // only the rows this rank owns
      const int64_t K = p.param->row_size;
      const auto [b, e] = part.shards.rows_of(p, part.group->rank());
      if (e > b)
        fill_on_device(fill, *p.param, b * K, (e - b) * K,
                       local_params_.data() + shard_offset_[u] + part.in_shard + p.in_shard);
    });
  }
}

double DataParallelStore::grad_sum_squares() {
  if (opts_.zero <= 1 && opts_.ep != nullptr) return ep_sum_squares(units_, full_grads_.data(), *opts_.ep);
  if (opts_.zero <= 1)
    return counted_sum_squares(units_, full_grads_.data());  // replicated: every element once
  // Disjoint shards (padding is zero): the experts' over their replicas and
  // ep, so the sum over the whole group counts every element once.
  double s = 0.0;
  for (size_t u = 0; u < units_.size(); ++u) {
    const float* shard = local_grads_.data() + shard_offset_[u];
    for_each_piece(u, [&](const Part& part, const UnitShards::Piece& p) {
      if (p.param->norm_counted)
        s += sum_squares(shard + part.in_shard + p.in_shard, p.shard_rows * p.param->row_size);
    });
  }
  shard_->all_reduce(&s, 1, "grad norm");  // HSDP: the replicas hold the same shards
  return s;
}

void DataParallelStore::grad_sum_squares_exact(ExactSum& acc) {
  if (opts_.zero <= 1 && opts_.ep != nullptr) {
    ep_sum_squares_exact(units_, full_grads_.data(), *opts_.ep, acc);  // each expert once
    return;
  }
  if (opts_.zero <= 1) {
    counted_sum_squares_exact(units_, full_grads_.data(), acc);  // replicated: every element once
    return;
  }
  ExactSum mine;  // disjoint shards, then their sum over the group
  for (size_t u = 0; u < units_.size(); ++u) {
    const float* shard = local_grads_.data() + shard_offset_[u];
    for_each_piece(u, [&](const Part& part, const UnitShards::Piece& p) {
      if (p.param->norm_counted)
        exact_sum_squares(mine, shard + part.in_shard + p.in_shard, p.shard_rows * p.param->row_size);
    });
  }
  shard_->all_reduce(mine.words(), ExactSum::kWords, "grad norm");
  mine.normalise();
  acc.merge(mine);
}

}  // namespace mt
