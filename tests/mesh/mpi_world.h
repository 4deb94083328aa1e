// The world group of an MPI test job (set by mpi_main.cpp before the tests run).
#pragma once

#include "comm/group.h"

namespace mt::test {
Group& world();
}  // namespace mt::test
