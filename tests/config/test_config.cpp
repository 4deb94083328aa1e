// Config::validate: each rule that spans keys fails with a ConfigError naming the
// values and the rule (STYLE.md §9), and every valid layout passes.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"

namespace mt {
namespace {

// The ConfigError text of c.validate(), or "" when it passes.
std::string validate_error(Config c) {
  try {
    c.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

Config with_tp(int64_t tp) {
  Config c;  // defaults: n_heads 8, n_kv_heads 8, ffn_hidden 1376, seq_len 256
  c.parallel.tp = tp;
  return c;
}

TEST(ConfigValidate, DefaultsPass) {
  EXPECT_EQ(validate_error(Config{}), "");
}

TEST(ConfigValidate, TensorParallelDegreesThatDivideThePlanPass) {
  for (int64_t tp : {1, 2, 4, 8})
    EXPECT_EQ(validate_error(with_tp(tp)), "") << "tp " << tp;
}

TEST(ConfigValidate, VocabNeedNotBeDivisibleByTp) {
  Config c = with_tp(4);
  c.model.vocab_size = 8191;  // padded to a multiple of tp by the vocab-parallel layers
  EXPECT_EQ(validate_error(c), "");
}

TEST(ConfigValidate, TpMustBePositive) {
  EXPECT_EQ(validate_error(with_tp(0)), "parallel.tp (0) must be positive");
}

TEST(ConfigValidate, NHeadsDivisibleByTp) {
  Config c = with_tp(2);
  c.model.d_model = 96;
  c.model.n_heads = 3;
  c.model.n_kv_heads = 1;
  EXPECT_EQ(validate_error(c),
            "model.n_heads (3) must be divisible by parallel.tp (2): attention is split by heads");
}

TEST(ConfigValidate, FfnHiddenDivisibleByTp) {
  Config c = with_tp(8);
  c.model.ffn_hidden = 1372;
  EXPECT_EQ(
      validate_error(c),
      "model.ffn_hidden (1372) must be divisible by parallel.tp (8): the MLP is split by hidden channels");
}

TEST(ConfigValidate, KvHeadsSplitOrReplicated) {
  // Split: tp divides n_kv_heads. Replicated: n_kv_heads divides tp.
  for (auto [kv, tp] : {std::pair<int64_t, int64_t>{4, 2}, {2, 4}, {1, 8}, {8, 8}}) {
    Config c = with_tp(tp);
    c.model.n_kv_heads = kv;
    EXPECT_EQ(validate_error(c), "") << "n_kv_heads " << kv << ", tp " << tp;
  }
  // n_heads 12, n_kv_heads 6, tp 4: neither 6 % 4 nor 4 % 6.
  Config c = with_tp(4);
  c.model.d_model = 96;
  c.model.n_heads = 12;
  c.model.n_kv_heads = 6;
  const std::string e = validate_error(c);
  EXPECT_NE(e.find("model.n_kv_heads (6) and parallel.tp (4): one must divide the other"), std::string::npos)
      << e;
  EXPECT_NE(e.find("split"), std::string::npos) << e;
  EXPECT_NE(e.find("replicated"), std::string::npos) << e;
}

TEST(ConfigValidate, SequenceParallelNeedsTp) {
  Config c;
  c.parallel.sp = true;
  EXPECT_EQ(validate_error(c),
            "parallel.sp = true needs tensor parallelism: parallel.tp (1) must be greater than 1");
  c.parallel.tp = 2;
  EXPECT_EQ(validate_error(c), "");
}

TEST(ConfigValidate, TpOverlapNeedsTp) {
  Config c;
  c.parallel.tp_overlap = true;
  EXPECT_EQ(validate_error(c),
            "parallel.tp_overlap = true needs tensor parallelism: parallel.tp (1) must be "
            "greater than 1 (there is no TP communication to hide)");
  c.parallel.tp = 2;
  EXPECT_EQ(validate_error(c), "");
}

TEST(ConfigValidate, SequenceParallelNeedsSeqLenDivisibleByTp) {
  Config c = with_tp(4);
  c.parallel.sp = true;
  c.train.seq_len = 250;
  const std::string e = validate_error(c);
  EXPECT_EQ(e.rfind("train.seq_len (250) must be divisible by parallel.tp (4) with parallel.sp = true", 0),
            0u)
      << e;
  c.parallel.sp = false;  // without SP every tp rank sees the whole sequence
  EXPECT_EQ(validate_error(c), "");
}

TEST(ConfigValidate, ContextParallelRules) {
  Config c;  // seq_len 256
  c.parallel.cp = 4;
  EXPECT_EQ(validate_error(c), "");
  c.train.seq_len = 12;  // 2 x cp = 8 chunks
  EXPECT_NE(validate_error(c).find("train.seq_len (12) must be divisible by 2 x parallel.cp (4) = 8"),
            std::string::npos);
  c.train.seq_len = 16;  // 4 tokens a rank, over tp = 8 with SP
  c.model.n_heads = 8;
  c.model.n_kv_heads = 8;
  c.model.ffn_hidden = 64;
  c.parallel.tp = 8;
  c.parallel.sp = true;
  EXPECT_NE(validate_error(c).find("train.seq_len / parallel.cp (4) must be divisible by parallel.tp (8)"),
            std::string::npos);
  c = Config{};
  c.parallel.virtual_stages = 2;
  c.parallel.schedule = "interleaved";
  EXPECT_NE(validate_error(c).find("parallel.virtual_stages (2) > 1 needs pipeline parallelism"),
            std::string::npos);
}

// The pipeline's start-up rules reach validate() with the run's numbers
// (microbatches = batch_size / (dp x microbatch_size)).
TEST(ConfigValidate, PipelineRules) {
  Config c;  // 8 layers; batch 32 / microbatch 4 = 8 microbatches
  c.train.batch_size = 32;
  c.train.microbatch_size = 4;
  c.parallel.pp = 4;
  EXPECT_EQ(validate_error(c), "");
  c.parallel.pp = 16;
  EXPECT_NE(validate_error(c).find("n_layers (8) must be at least pp (16) x v (1) = 16"), std::string::npos);
  c.parallel.pp = 4;
  c.train.microbatch_size = 16;  // 2 microbatches
  EXPECT_NE(validate_error(c).find("the 1f1b schedule needs microbatches (2) >= pp (4)"), std::string::npos);
  c.train.microbatch_size = 4;
  c.parallel.pp = 3;  // 8 microbatches over 3 ranks, 2 chunks each: 6 virtual stages of 8 layers
  c.parallel.schedule = "interleaved";
  c.parallel.virtual_stages = 2;
  EXPECT_NE(
      validate_error(c).find("microbatches (8) must be a multiple of pp (3) for the interleaved schedule"),
      std::string::npos);
  c.parallel.pp = 4;
  EXPECT_EQ(validate_error(c), "");
  c.parallel.schedule = "gpipe";
  EXPECT_NE(validate_error(c).find("v (2) model chunks per rank needs the interleaved schedule"),
            std::string::npos);
}

TEST(ConfigValidate, OverridesReachTheRules) {
  const Config c =
      parse_config_text("[parallel]\ntp = 2\n", "test.toml", {"parallel.sp=true", "train.seq_len=7"});
  EXPECT_EQ(c.parallel.tp, 2);
  EXPECT_TRUE(c.parallel.sp);
  EXPECT_NE(validate_error(c).find("train.seq_len (7) must be divisible by parallel.tp (2)"),
            std::string::npos);
}

// The schedule name and the CP strategy are read by the functions the
// pipeline and the attention use (pp::parse_schedule_kind, cp::parse_cp_impl).
TEST(ConfigValidate, NamedChoices) {
  Config c;
  c.parallel.schedule = "zb";
  EXPECT_EQ(validate_error(c), "unknown pipeline schedule 'zb': use gpipe, 1f1b, interleaved or zbh1");
  c = Config{};
  c.parallel.cp_impl = "striped";
  EXPECT_EQ(validate_error(c), "parallel.cp_impl ('striped') must be ring, allgather, ulysses or hybrid");
}

// Ulysses splits the attention's heads over the all-to-all; the hybrid's group
// size divides cp and lies strictly between 1 and cp (parallel/cp_ulysses.h).
TEST(ConfigValidate, UlyssesAndHybridRules) {
  Config c;
  c.train.seq_len = 16;
  c.model.max_seq_len = 16;
  c.model.d_model = 48;
  c.model.n_heads = 6;
  c.model.n_kv_heads = 6;
  c.parallel.cp = 4;
  c.parallel.cp_impl = "ulysses";
  EXPECT_EQ(validate_error(c),
            "parallel.cp_impl = ulysses (cp 4, tp 1): the all-to-all over 4 ranks needs the query heads per "
            "rank (n_heads / tp = 6) divisible by 4");
  c.model.n_heads = 8;
  c.model.n_kv_heads = 8;
  EXPECT_EQ(validate_error(c), "");
  c.model.n_kv_heads = 2;  // 4 / 2: each kv head replicated over two ranks
  EXPECT_EQ(validate_error(c), "");
  c.parallel.cp_ulysses = 2;
  EXPECT_EQ(validate_error(c),
            "parallel.cp_ulysses (2) is the all-to-all group size of parallel.cp_impl = hybrid, not ulysses");
  c.parallel.cp_impl = "hybrid";
  EXPECT_EQ(validate_error(c), "");
  for (int64_t bad : {0, 1, 3, 4}) {
    c.parallel.cp_ulysses = bad;
    EXPECT_NE(
        validate_error(c).find("parallel.cp_impl = hybrid needs parallel.cp_ulysses (" + std::to_string(bad) +
                               ") dividing parallel.cp (4) with 1 < cp_ulysses < cp"),
        std::string::npos)
        << bad;
  }
}

// The hierarchical all-reduce cuts the ZeRO 0/1 all-reduce over dp x cp
// (parallel/dp_allreduce.h): each rule it refuses, by name.
TEST(ConfigValidate, HierarchicalAllReduceRules) {
  Config c;
  c.parallel.dp_allreduce = "tree";
  EXPECT_EQ(validate_error(c), "parallel.dp_allreduce ('tree') must be flat or hierarchical");
  c.parallel.dp_allreduce = "hierarchical";
  EXPECT_EQ(
      validate_error(c),
      "parallel.dp_allreduce = hierarchical needs a gradient all-reduce: parallel.dp (1) x parallel.cp (1) "
      "is 1");
  c.parallel.dp = 4;
  c.train.batch_size = 8;
  c.train.microbatch_size = 2;
  EXPECT_EQ(validate_error(c), "");
  c.parallel.zero = 1;
  EXPECT_EQ(validate_error(c), "");
  c.parallel.zero = 2;
  EXPECT_NE(validate_error(c).find("parallel.zero (2) reduce-scatters instead"), std::string::npos);
  c.parallel.zero = 1;
  c.parallel.dp_shard = 2;
  EXPECT_NE(validate_error(c).find("with parallel.dp_shard (2) < parallel.dp (4)"), std::string::npos);
}

TEST(ConfigSetKeys, FileAndOverridesAreRememberedDefaultsAreNot) {
  const Config c = parse_config_text("[parallel]\nzero = 3\n[train]\nlr = 0.01\n", "test.toml",
                                     {"parallel.bucket_mb=4", "model.n_layers=2"});
  EXPECT_EQ(c.set_keys,
            (std::set<std::string>{"parallel.zero", "train.lr", "parallel.bucket_mb", "model.n_layers"}));
  EXPECT_TRUE(c.was_set("parallel.bucket_mb"));
  EXPECT_FALSE(c.was_set("parallel.cp_impl"));
  EXPECT_TRUE(Config{}.set_keys.empty());
}

// Notes name a key only when the user set it and the layout ignores it.
TEST(ConfigNotes, KeysWithoutEffectInTheLayout) {
  EXPECT_EQ(ineffective_keys(parse_config_text("", "t", {"parallel.zero=3"})), std::vector<std::string>{});
  EXPECT_EQ(ineffective_keys(parse_config_text("", "t", {"parallel.zero=3", "parallel.bucket_mb=4"})),
            std::vector<std::string>{"parallel.bucket_mb has no effect with parallel.zero = 3"});
  EXPECT_EQ(ineffective_keys(parse_config_text("", "t", {"parallel.zero=1", "parallel.bucket_mb=4"})),
            std::vector<std::string>{});
  const Config c = parse_config_text(
      "[parallel]\ncp_impl = \"allgather\"\nschedule = \"gpipe\"\nvirtual_stages = 1\nstage_layers = \"8\"\n"
      "[train]\neval_every = 0\neval_windows = 4\n",
      "t", {});
  EXPECT_EQ(ineffective_keys(c), (std::vector<std::string>{
                                     "parallel.cp_impl has no effect with parallel.cp = 1",
                                     "parallel.schedule has no effect with parallel.pp = 1",
                                     "parallel.virtual_stages has no effect with parallel.pp = 1",
                                     "parallel.stage_layers has no effect with parallel.pp = 1",
                                     "train.eval_windows has no effect with train.eval_every = 0",
                                 }));
  EXPECT_EQ(
      ineffective_keys(parse_config_text("", "t",
                                         {"parallel.cp=2", "parallel.cp_impl=allgather", "parallel.pp=2",
                                          "parallel.schedule=gpipe", "train.eval_windows=4"})),
      std::vector<std::string>{});
  EXPECT_EQ(
      ineffective_keys(parse_config_text("", "t", {"train.async_checkpoint=true"})),
      std::vector<std::string>{"train.async_checkpoint has no effect with train.checkpoint_dir = \"\""});
  EXPECT_EQ(
      ineffective_keys(parse_config_text("", "t", {"train.async_checkpoint=true", "train.checkpoint_dir=c"})),
      std::vector<std::string>{});
}

TEST(ConfigHelp, TpAndSpAreNoLongerMarkedUnimplemented) {
  for (const auto& k : config_keys()) {
    if (k.name == "parallel.tp" || k.name == "parallel.sp") {
      EXPECT_EQ(k.help.find("not yet"), std::string::npos) << k.name << ": " << k.help;
    }
  }
  const std::string help = config_help();
  EXPECT_NE(help.find("parallel.tp = 1"), std::string::npos);
  EXPECT_NE(help.find("parallel.sp = false"), std::string::npos);
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

Config with_tp2d(int64_t tp, const char* grid) {
  Config c = with_tp(tp);
  c.parallel.tp2d = grid;
  return c;
}

// parallel.tp2d = "R,C" (parallel/tp2d.h): "1,C" is 1-D tp over C ranks.
TEST(ConfigValidate, Tp2dOneRowIsOneDimensionalTp) {
  EXPECT_EQ(validate_error(with_tp2d(4, "1,4")), "");
  EXPECT_EQ(validate_error(with_tp2d(1, "1,1")), "");
  Config c = with_tp2d(4, "1,4");
  c.parallel.sp = true;  // 1-D tp's companions stay allowed
  EXPECT_EQ(validate_error(c), "");
}

TEST(ConfigValidate, Tp2dMalformedGridsNameTheValue) {
  for (const char* bad : {"2x2", "2,", ",2", "0,4", "a,b", "2,2,1", "-1,-4", "2, 2", "4"}) {
    EXPECT_EQ(validate_error(with_tp2d(4, bad)),
              std::string("parallel.tp2d ('") + bad +
                  "') must be \"R,C\": two positive integers, the grid's rows and columns, with R x C = "
                  "parallel.tp")
        << bad;
  }
}

TEST(ConfigValidate, Tp2dGridMustHoldTp) {
  EXPECT_EQ(validate_error(with_tp2d(4, "3,2")),
            "parallel.tp2d ('3,2'): R x C (3 x 2 = 6) must equal parallel.tp (4)");
  EXPECT_EQ(validate_error(with_tp2d(1, "2,2")),
            "parallel.tp2d ('2,2'): R x C (2 x 2 = 4) must equal parallel.tp (1)");
}

// Each companion 2-D tp is not built with is named, before the general refusal.
TEST(ConfigValidate, Tp2dRefusesByName) {
  auto refused = [](Config c, const std::string& what) {
    const std::string e = validate_error(c);
    EXPECT_NE(
        e.find("parallel.tp2d (\"2,2\") with " + what + ": 2-D tensor parallelism is not built with it"),
        std::string::npos)
        << e;
  };
  Config c = with_tp2d(4, "2,2");
  c.parallel.sp = true;
  refused(c, "parallel.sp = true");
  c = with_tp2d(4, "2,2");
  c.parallel.cp = 2;
  refused(c, "parallel.cp > 1");
  c = with_tp2d(4, "2,2");
  c.parallel.pp = 2;  // each stage's tp group a grid (tests/dist/tp2d.sh)
  EXPECT_EQ(validate_error(c).find("2-D tensor parallelism is not built with it"), std::string::npos);
  c = with_tp2d(4, "2,2");
  c.model.hidden_dropout = 0.1;
  refused(c, "dropout (model.attention_dropout or model.hidden_dropout > 0)");
  c = with_tp2d(4, "2,2");
  c.train.checkpoint_dir = "ckpt";  // 2-D pieces have their layouts: checkpoints run (tests/dist/tp2d.sh)
  EXPECT_EQ(validate_error(c), "");
  c = with_tp2d(4, "2,2");
  c.parallel.tp_overlap = true;
  refused(c, "parallel.tp_overlap = true");
  c = with_tp2d(4, "2,2");
  c.model.n_kv_heads = 2;  // 1-D tp would replicate each kv head on two ranks
  EXPECT_EQ(validate_error(c),
            "model.n_kv_heads (2) must be divisible by R x C (4) under parallel.tp2d (\"2,2\"): kv heads are "
            "split over the grid, never replicated");
  EXPECT_EQ(validate_error(with_tp2d(4, "2,2")), "");  // the model runs it (tests/dist/tp2d.sh)
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// train.recompute takes a TOML boolean (today's values) or a mode string.
TEST(ConfigRecompute, BooleansAndModesParse) {
  const auto parsed = [](const std::string& toml) {
    Config c = parse_config_text(toml, "test.toml", {});
    c.validate();
    return to_string(c.parsed().recompute);
  };
  EXPECT_EQ(parsed(""), "none");
  EXPECT_EQ(parsed("[train]\nrecompute = true\n"), "full");
  EXPECT_EQ(parsed("[train]\nrecompute = false\nrecompute_modules = \"mlp\"\n"), "none");
  EXPECT_EQ(parsed("[train]\nrecompute = \"full\"\n"), "full");
  EXPECT_EQ(parsed("[train]\nrecompute = \"selective\"\n"), "selective(attention)");  // the default module
  EXPECT_EQ(parsed("[train]\nrecompute = \"selective\"\nrecompute_modules = \"norms,mlp\"\n"),
            "selective(mlp,norms)");
  EXPECT_THROW(parsed("[train]\nrecompute = 1\n"), ConfigError);
  EXPECT_THROW(parsed("[train]\nrecompute_modules = true\n"), ConfigError);  // a string key
  EXPECT_EQ(ineffective_keys(parse_config_text("", "t", {"train.recompute_modules=mlp"})),
            std::vector<std::string>{"train.recompute_modules has no effect with train.recompute = none"});
}

}  // namespace
}  // namespace mt
