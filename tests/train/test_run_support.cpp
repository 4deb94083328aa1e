// MESHTRAIN_FAULT's grammar: every accepted form, and every malformed one
// refused with the value and the grammar (never ignored).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "train/run_support.h"

namespace mt {
namespace {

using ::testing::HasSubstr;

TEST(FaultGrammar, AcceptsEveryKind) {
  Fault f = parse_fault("throw:1:3");
  EXPECT_EQ(f.kind, "throw");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.step, 3);
  EXPECT_EQ(parse_fault("stall:0:12").step, 12);
  EXPECT_EQ(parse_fault("bad_alloc:2:0").rank, 2);
  f = parse_fault("enospc:0:5:4096");
  EXPECT_EQ(f.kind, "enospc");
  EXPECT_EQ(f.arg, 4096);
  EXPECT_EQ(parse_fault("slow_io:1:0:3").arg, 3);
  f = parse_fault("sigterm:3:7");
  EXPECT_EQ(f.kind, "sigterm");
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.step, 7);
  f = parse_fault("kill_save:1:4:rename_before");
  EXPECT_EQ(f.kind, "kill_save");
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.step, 4);
  EXPECT_EQ(f.point, "rename_before");
  f = parse_fault("kill_bytes:0:2:1234");
  EXPECT_EQ(f.kind, "kill_bytes");
  EXPECT_EQ(f.arg, 1234);
}

void expect_refused(const std::string& text, const std::string& why) {
  try {
    parse_fault(text);
    ADD_FAILURE() << "'" << text << "' was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("MESHTRAIN_FAULT '" + text + "'"));
    EXPECT_THAT(e.what(), HasSubstr(why));
    EXPECT_THAT(e.what(), HasSubstr("KIND:RANK:STEP[:ARG]"));
    EXPECT_THAT(e.what(), HasSubstr("throw, bad_alloc, stall"));
    EXPECT_THAT(e.what(), HasSubstr("kill_save:RANK:STEP:POINT (POINT one of file_fsync_before,"));
  }
}

TEST(FaultGrammar, RefusesUnknownKindsAndJunk) {
  expect_refused("explode:1:3", "unknown kind 'explode'");
  expect_refused("Throw:1:3", "unknown kind 'Throw'");
  expect_refused("", "unknown kind ''");
  expect_refused("throw:1:3junk", "STEP '3junk' is not a non-negative integer");
  expect_refused("throw:1:3:4", "kind throw takes 3 fields but 4 were given");
  expect_refused("throw:1", "kind throw takes 3 fields but 2 were given");
  expect_refused("throw:-1:3", "RANK '-1' is not a non-negative integer");
  expect_refused("throw: 1:3", "RANK ' 1'");
  expect_refused("stall:0:x", "STEP 'x'");
  expect_refused("enospc:0:0", "kind enospc takes 4 fields but 3 were given");
  expect_refused("sigterm:0:0:1", "kind sigterm takes 3 fields but 4 were given");
  expect_refused("enospc:0:0:1e6", "ARG '1e6'");
  expect_refused("slow_io:0:0:2:", "takes 4 fields but 5 were given");
  expect_refused("throw:99999999999:0", "RANK '99999999999'");
  expect_refused("kill_save:0:1:rename", "POINT 'rename' is not a kill point");
  expect_refused("kill_save:0:1", "kind kill_save takes 4 fields but 3 were given");
  expect_refused("kill_bytes:0:1:-5", "ARG '-5'");
  expect_refused("kill_bytes:0:1:12:3", "takes 4 fields but 5 were given");
}

// A fault that cannot fire in the run is refused at start-up (issue 24, fault 16).
TEST(FaultGrammar, RefusesFaultsThatCannotFire) {
  check_fault_fires({}, 2, "");  // no fault
  check_fault_fires(parse_fault("throw:1:1"), 2, "");
  check_fault_fires(parse_fault("kill_save:0:1:shard_written"), 1, "ck");
  try {
    check_fault_fires(parse_fault("throw:5:1"), 2, "");
    ADD_FAILURE() << "rank 5 of 2 accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("names rank 5 but the world has 2 rank(s)"));
  }
  EXPECT_THROW(check_fault_fires(parse_fault("stall:2:1"), 2, ""), ConfigError);  // ranks are 0 and 1
  try {
    check_fault_fires(parse_fault("kill_save:0:1:shard_written"), 1, "");
    ADD_FAILURE() << "kill_save without checkpoint_dir accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("set train.checkpoint_dir"));
  }
}

}  // namespace
}  // namespace mt
