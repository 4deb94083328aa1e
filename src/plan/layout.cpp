#include "plan/layout.h"

#include <cctype>
#include <sstream>

#include "core/error.h"
#include "plan/node_order.h"

namespace mt::plan {

const char* recompute_name(Recompute r) {
  return r == Recompute::full ? "full" : r == Recompute::selective ? "selective" : "none";
}

std::string cp_attention_name(const PlanLayout& l) {
  if (l.cp_impl == cp::CpImpl::hybrid) return "hybrid" + std::to_string(l.cp_a2a);
  return cp::cp_impl_name(l.cp_impl);
}

std::string to_string(const PlanLayout& l) {
  std::ostringstream os;
  os << "dp" << l.dp << ",tp" << l.tp << ",pp" << l.pp << ",cp" << l.cp;
  if (l.cp > 1 || l.cp_impl != cp::CpImpl::ring) os << "," << cp_attention_name(l);
  os << ",ep" << l.ep << ",zero" << l.zero << ",mbs" << l.mbs << ",v" << l.v << (l.sp ? ",sp" : "")
     << ",recompute=" << recompute_name(l.recompute);
  if (l.shard > 0 && l.shard != l.dp) os << ",shard" << l.shard;
  if (l.hier_dp) os << ",hier";
  if (l.zb) os << ",zbh1";
  if (!l.inner.empty()) os << ",inner=" << node_order_name(l.inner);
  return os.str();
}

namespace {
// "tp8" → 8 when the field starts with `key` followed by digits only.
bool number_field(const std::string& f, const std::string& key, int64_t* out) {
  if (f.size() <= key.size() || f.compare(0, key.size(), key) != 0) return false;
  for (size_t i = key.size(); i < f.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(f[i]))) return false;
  *out = std::stoll(f.substr(key.size()));
  return true;
}
}  // namespace

LayoutSpec parse_layout(const std::string& text) {
  LayoutSpec s;
  PlanLayout& l = s.layout;
  std::stringstream ss(text);
  std::string f;
  while (std::getline(ss, f, ',')) {
    if (f.empty()) continue;
    const struct {
      const char* key;
      int64_t* value;
      bool* has;
    } fields[] = {{"zero", &l.zero, &s.has_zero}, {"shard", &l.shard, &s.has_shard},
                  {"mbs", &l.mbs, &s.has_mbs},    {"dp", &l.dp, &s.has_dp},
                  {"tp", &l.tp, &s.has_tp},       {"pp", &l.pp, &s.has_pp},
                  {"cp", &l.cp, &s.has_cp},       {"ep", &l.ep, &s.has_ep},
                  {"v", &l.v, &s.has_v},          {"hybrid", &l.cp_a2a, &s.has_cp_impl}};
    bool done = false;
    for (const auto& fd : fields)
      if (!done && number_field(f, fd.key, fd.value)) done = *fd.has = true;
    if (done) {
      if (f.rfind("hybrid", 0) == 0) l.cp_impl = cp::CpImpl::hybrid;
      continue;
    }
    if (f == "ring" || f == "ulysses") {
      l.cp_impl = f == "ring" ? cp::CpImpl::ring : cp::CpImpl::ulysses;
      l.cp_a2a = 0;
      s.has_cp_impl = true;
    } else if (f == "zbh1" || f == "nozb") {
      l.zb = f == "zbh1";
      s.has_zb = true;
    } else if (f == "hier" || f == "nohier") {
      l.hier_dp = f == "hier";
      s.has_hier = true;
    } else if (f == "sp" || f == "nosp") {
      l.sp = f == "sp";
      s.has_sp = true;
    } else if (f.rfind("recompute=", 0) == 0) {
      const std::string r = f.substr(10);
      MT_REQUIRE(r == "none" || r == "selective" || r == "full", ConfigError, "--layout field '", f,
                 "': recompute must be none, selective or full");
      l.recompute = r == "full" ? Recompute::full : r == "selective" ? Recompute::selective : Recompute::none;
      s.has_recompute = true;
    } else if (f.rfind("inner=", 0) == 0) {
      l.inner = parse_node_order(f.substr(6));
      s.has_inner = true;
    } else {
      MT_THROW(
          ConfigError, "--layout field '", f,
          "' is not one of dpN, tpN, ppN, cpN, ring, ulysses, hybridN, epN, zeroN, mbsN, vN, shardN, sp, "
          "nosp, zbh1, nozb, hier, nohier, recompute=none|selective|full, inner=AXES (e.g. inner=cp+dp)");
    }
  }
  for (int64_t v : {l.dp, l.tp, l.pp, l.cp, l.ep, l.mbs, l.v})
    MT_REQUIRE(v >= 1, ConfigError, "--layout '", text, "': every size must be at least 1");
  return s;
}

Config to_config(const PlanInput& in, const PlanLayout& l) {
  Config c;
  c.model = in.model;
  c.train.batch_size = in.global_batch;
  c.train.microbatch_size = l.mbs;
  c.train.seq_len = in.seq_len;
  // The planner's selective is its own analytic form (plan/memory.cpp, plan/cost.cpp), not a module
  // choice of the trainer's: its memory starts from the run without recomputation.
  c.train.recompute = l.recompute == Recompute::full ? "full" : "none";
  c.parallel.dp = l.dp;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.cp = l.cp;
  c.parallel.cp_impl = cp::cp_impl_name(l.cp_impl);  // the memory estimate sizes this attention's buffers
  c.parallel.cp_ulysses = l.cp_impl == cp::CpImpl::hybrid ? l.cp_a2a : 0;
  c.parallel.ep = l.ep;
  c.parallel.zero = l.zero;
  c.parallel.dp_shard = l.shard_size() < l.dp ? l.shard_size() : 0;  // HSDP: the trainer's parallel.dp_shard
  c.parallel.dp_allreduce = l.hier_dp ? "hierarchical" : "flat";     // check_dp_allreduce's rules, by name
  c.parallel.sp = l.sp;
  c.parallel.virtual_stages = l.v;
  c.parallel.schedule = l.v > 1 ? "interleaved" : l.zb ? "zbh1" : "1f1b";
  c.validate();  // also parses the typed keys the memory estimate reads
  return c;
}

void check_layout(const PlanInput& in, const PlanLayout& l) {
  MT_REQUIRE(l.devices() == in.devices, ConfigError, "dp (", l.dp, ") x tp (", l.tp, ") x pp (", l.pp,
             ") x cp (", l.cp, ") = ", l.devices(), " but --devices is ", in.devices);
  MT_REQUIRE(l.shard == 0 || (l.shard >= 1 && l.dp % l.shard == 0), ConfigError, "shard (", l.shard,
             ") must divide dp (", l.dp, ")");
  MT_REQUIRE(l.shard == 0 || l.shard == l.dp || l.zero > 0, ConfigError, "shard (", l.shard,
             ") needs a ZeRO stage above 0: HSDP shards the ZeRO state");
  MT_REQUIRE(l.cp > 1 || l.cp_impl == cp::CpImpl::ring, ConfigError, "--layout's ", cp_attention_name(l),
             " is a cp attention, but cp is 1");
  MT_REQUIRE(l.cp_impl != cp::CpImpl::allgather, ConfigError,
             "the planner models cp's ring, ulysses and hybrid attention, not allgather");
  to_config(in, l);  // Config::validate
}

}  // namespace mt::plan
