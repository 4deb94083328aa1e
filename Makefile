# meshtrain — the two commands: `make demo` and `make test`.
# Each installs what is missing (scripts/install-deps.sh), then builds.

BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_FLAGS ?=
# Tests that start MPI processes. Under the sanitizers they run without leak
# detection: Open MPI and the OpenBLAS threads it starts keep allocations until
# exit that LeakSanitizer reports (often as "<unknown module>") but that are not
# ours. Every other test runs with leak detection on.
MPI_TESTS = ^(comm_|mesh_mpi|cli_|dist_|tp_np|tp_seed|cp_np|train_explain)

.PHONY: all deps build demo test test-asan bench bench-bf16 bench-bf16-layouts bench-ddp bench-attention bench-dist bench-tp bench-pp bench-cp bench-cp-impl bench-moe bench-generate format clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja: CMakeLists.txt | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHTRAIN_WERROR=ON $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 600

test-asan: deps
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMESHTRAIN_WERROR=ON \
	  -DMESHTRAIN_SANITIZE=ON -DMESHTRAIN_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(BUILD_ASAN) -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS) --timeout 1200 \
	  -E '$(MPI_TESTS)'
	ASAN_OPTIONS=detect_leaks=0 ctest --test-dir $(BUILD_ASAN) --output-on-failure -j $(JOBS) --timeout 1200 \
	  -R '$(MPI_TESTS)'

demo: build
	bash scripts/demo.sh $(BUILD)

bench: build
	bash scripts/bench.sh $(BUILD)

bench-bf16: build
	bash scripts/bench_bf16.sh $(BUILD)

bench-bf16-layouts: build
	bash scripts/bench_bf16_layouts.sh $(BUILD)

bench-ddp: build
	bash scripts/bench_ddp.sh $(BUILD)

bench-attention: build
	$(BUILD)/bench/meshtrain_attention_bench

bench-dist: build
	bash scripts/bench_dist.sh $(BUILD)

bench-tp: build
	bash scripts/bench_tp.sh $(BUILD)

bench-pp: build
	bash scripts/bench_pp.sh $(BUILD)

bench-cp: build
	bash scripts/bench_cp.sh $(BUILD)

bench-cp-impl: build
	bash scripts/bench_cp_impl.sh $(BUILD)

bench-moe: build
	bash bench/moe/moe_bench.sh $(BUILD)
	bash bench/moe/congestion.sh $(BUILD)

bench-generate: build
	$(BUILD)/bench/meshtrain_generate_bench

format:
	find src tests bench -name '*.cpp' -o -name '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
