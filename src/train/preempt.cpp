#include "train/preempt.h"

#include <signal.h>

#include <csignal>

#include "core/error.h"

namespace mt {

namespace {

// Written by the handlers, read by the main thread: lock-free atomics of this
// type are the only state a handler may touch.
volatile std::sig_atomic_t g_sigterm = 0;
volatile std::sig_atomic_t g_sigusr1 = 0;

extern "C" void on_stop_signal(int sig) {
  if (sig == SIGTERM) g_sigterm = 1;
  if (sig == SIGUSR1) g_sigusr1 = 1;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read, write or MPI wait interrupted by the signal goes on
  MT_REQUIRE(sigaction(SIGTERM, &sa, nullptr) == 0, Error, "cannot install the SIGTERM handler");
  MT_REQUIRE(sigaction(SIGUSR1, &sa, nullptr) == 0, Error, "cannot install the SIGUSR1 handler");
}

void release_stop_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  MT_REQUIRE(sigaction(SIGTERM, &sa, nullptr) == 0, Error, "cannot restore the SIGTERM default");
  MT_REQUIRE(sigaction(SIGUSR1, &sa, nullptr) == 0, Error, "cannot restore the SIGUSR1 default");
  if (g_sigterm != 0) std::raise(SIGTERM);
  if (g_sigusr1 != 0) std::raise(SIGUSR1);
}

bool got_sigterm() {
  return g_sigterm != 0;
}

bool got_sigusr1() {
  return g_sigusr1 != 0;
}

}  // namespace mt
