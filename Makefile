# zerotrain build. `make` builds ./zerotrain (CPU backend always); `make test`
# runs every test; `make run` installs deps, builds and trains the default model.
# `make sanitize` and `make fuzz` build into their own dirs (see the end).

CC       := mpicc
PYTHON   := /usr/bin/python3
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror
OPT      ?= -O3 -march=x86-64-v2 -fno-math-errno
# Extra compile and link flags of the sanitizer and fuzz builds.
SAN_FLAGS :=
CFLAGS   += $(CSTD) $(WARN) $(OPT) -g -fopenmp $(SAN_FLAGS) -iquote .
# The OpenMP build of OpenBLAS shares our OpenMP thread pool; the pthread build
# would run its own threads that fight our idle-spinning OpenMP threads.
OPENBLAS_DIR ?= $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp))
ifneq ($(OPENBLAS_DIR),)
CFLAGS   += -I$(subst /lib/,/include/,$(OPENBLAS_DIR))
LDLIBS   += -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR)
endif
# liburing: the nvme offload's asynchronous swap I/O (engine/nvme/aio.c).
LDLIBS   += -ljansson -lopenblas -luring -lm
VERSION  := 0.1.0
CFLAGS   += -DZT_VERSION=\"$(VERSION)\"

# Both (and SAN_FLAGS) are set on the command line by the sanitizer and fuzz builds.
BUILD    := build
BIN      := zerotrain

# GPU toolkit detection: nvcc (CUDA_HOME, or PATH) builds the CUDA backend with
# cuBLAS; NCCL (NCCL_HOME, default CUDA_HOME, or the system) adds the NCCL
# communicator. NO_CUDA=1 builds the CPU binary only.
NO_CUDA   ?= 0
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC      := $(shell [ "$(NO_CUDA)" = 1 ] || command -v $(CUDA_HOME)/bin/nvcc 2>/dev/null || command -v nvcc 2>/dev/null)
HAVE_CUBLAS := $(shell [ -n "$(NVCC)" ] && ls $(CUDA_HOME)/lib64/libcublas.so* >/dev/null 2>&1 && echo 1)
NCCL_LIB  := $(firstword $(dir $(wildcard $(NCCL_HOME)/lib64/libnccl.so $(NCCL_HOME)/lib/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so /usr/lib/aarch64-linux-gnu/libnccl.so)))
NCCL_INC  := $(firstword $(dir $(wildcard $(NCCL_HOME)/include/nccl.h /usr/include/nccl.h)))
HAVE_NCCL := $(if $(NVCC),$(if $(NCCL_LIB),$(if $(NCCL_INC),1)))

# sm_80 (A100) and sm_90 (H100/H200) machine code, plus sm_90 PTX so newer GPUs
# can JIT it.
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCCFLAGS := -std=c++17 -O3 -g -lineinfo $(CUDA_ARCH) --Werror all-warnings \
             -Xcompiler -Wall,-Wextra,-Werror -DZT_HAVE_CUDA -DZT_VERSION=\"$(VERSION)\" \
             -I. -Xptxas -v

ENGINE_SRC := $(wildcard engine/*.c engine/*/*.c models/*.c data/*.c)
ENGINE_SRC := $(filter-out engine/comm/nccl.c engine/comm/nccl_absent.c engine/cuda/cuda_absent.c,$(ENGINE_SRC))
ifneq ($(NVCC),)
ifneq ($(HAVE_CUBLAS),1)
$(error nvcc found at $(NVCC) but no libcublas.so under $(CUDA_HOME)/lib64: set CUDA_HOME, or NO_CUDA=1 for a CPU-only build)
endif
CUDA_SRC   := $(wildcard engine/cuda/*.cu)
CFLAGS     += -DZT_HAVE_CUDA -I$(CUDA_HOME)/include
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcublasLt -lcudart -lstdc++
ifeq ($(HAVE_NCCL),1)
ENGINE_SRC += engine/comm/nccl.c
CFLAGS     += -DZT_HAVE_NCCL -I$(NCCL_INC)
LDLIBS     += -L$(NCCL_LIB) -Wl,-rpath,$(NCCL_LIB) -lnccl
else
ENGINE_SRC += engine/comm/nccl_absent.c
endif
BUILT_WITH := CUDA backend (nvcc $(NVCC), cuBLAS $(CUDA_HOME)/lib64)$(if $(HAVE_NCCL), + NCCL comm ($(NCCL_LIB)), ; NCCL not found: no NCCL comm)
else
CUDA_SRC   :=
ENGINE_SRC += engine/cuda/cuda_absent.c engine/comm/nccl_absent.c
BUILT_WITH := no nvcc (CUDA_HOME=$(CUDA_HOME), NO_CUDA=$(NO_CUDA)): CPU-only build
endif
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o) $(CUDA_SRC:%.cu=$(BUILD)/%.o)
CMD_OBJ    := $(patsubst %.c,$(BUILD)/%.o,$(wildcard cmd/*.c))
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
TOOLS      := $(BUILD)/tests/comm-check $(BUILD)/tests/quant-dump $(BUILD)/tests/qgz-check $(if $(NVCC),$(BUILD)/tests/op-check $(BUILD)/tests/mma-check)

.PHONY: all deps gpu-audit test unit-test tests run clean toolkit FORCE bench bench-comm bench-check sanitize sanitize-build fuzz fuzz-build sim \
        sim-sanitize
all: toolkit $(BIN)

toolkit:
	@echo "zerotrain: CPU backend: OpenBLAS ($(if $(OPENBLAS_DIR),$(OPENBLAS_DIR),system default: install libopenblas-openmp-dev for the OpenMP build)) + OpenMP (always built)"
	@echo "zerotrain: $(BUILT_WITH)"

$(BIN): $(CMD_OBJ) $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libzt.a: $(ENGINE_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The optimizer kernels must round like their scalar reference on every ISA
# path they are compiled for: no multiply-add fused into an FMA, whatever
# CSTD (gnu11 would default to contraction) or OPT (-march with FMA) says.
$(BUILD)/engine/cpu/optim_cpu.o: CFLAGS += -ffp-contract=off
# Likewise the dequantize's product and sum (engine/cpu/quant_cpu.h).
$(BUILD)/engine/cpu/quant_cpu.o: CFLAGS += -ffp-contract=off
# The fused attention's exp loops vectorise only when GCC may if-convert float
# compares (engine/cpu/backend_cpu_flash.c); nothing reads FP exception flags.
# Its AVX-512 path must not fuse multiply-adds either (as the optimizer's).
$(BUILD)/engine/cpu/backend_cpu_flash.o: CFLAGS += -fno-trapping-math -ffp-contract=off

# The configuration the objects in $(BUILD) were compiled with: rewritten
# only when it changes (`make NO_CUDA=1` after `make`, another OPT or
# CUDA_HOME), and every object depends on it, so such a switch recompiles
# everything instead of linking objects of two configurations together.
BUILD_FLAGS := $(BUILD)/.build-flags
FLAGS_NOW   := $(CC) $(CFLAGS) | $(NVCC) $(NVCCFLAGS) | $(LDLIBS)
$(BUILD_FLAGS): FORCE
	@mkdir -p $(dir $@)
	@if [ "$$(cat $@ 2>/dev/null)" != '$(FLAGS_NOW)' ]; then \
	    [ ! -f $@ ] || echo "zerotrain: the build configuration changed: rebuilding $(BUILD)"; \
	    echo '$(FLAGS_NOW)' > $@; fi
FORCE:

$(BUILD)/%.o: %.c $(BUILD_FLAGS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

# ptxas's resource lines (-Xptxas -v: registers, stack, spills per kernel and
# architecture) go to X.ptxas beside X.o for the SASS audit (make gpu-audit);
# anything else nvcc prints still reaches the terminal.
PTXAS_INFO := -e '/^ptxas info/d' -e '/^    [0-9]* bytes stack frame/d'
$(BUILD)/%.o: %.cu $(BUILD_FLAGS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -MF $(@:.o=.d) -c $< -o $@ 2>$(@:.o=.ptxas) || \
	    { sed $(PTXAS_INFO) $(@:.o=.ptxas) >&2; exit 1; }
	@sed $(PTXAS_INFO) $(@:.o=.ptxas) >&2

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS) -lcmocka

$(BUILD)/bench-sgemm: scripts/bench_sgemm.c $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

# mpirun -np N build/bench-comm: zerotrain's MPI comm against plain MPI.
$(BUILD)/bench-comm: scripts/bench_comm.c $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

$(BUILD)/bench-adam: scripts/bench_adam.c $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

# bash scripts/bench-nvme.sh DIR: the nvme offload's swap I/O and step time.
$(BUILD)/bench-nvme: scripts/bench_nvme.c $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

$(BUILD)/tests/tokenize-tool: tests/tools/tokenize_main.c $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

# Run by tests/mpi/test_comm_dtypes.sh under mpirun.
$(BUILD)/tests/comm-check: tests/tools/comm_check.c $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

# The CPU quantization ops' outputs for tests/reference/test_quant_numpy.py.
$(BUILD)/tests/quant-dump: tests/tools/quant_dump.c $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

# ZeRO++'s qgZ all-to-all against a float64 sum, run by tests/mpi/test_zeropp.sh.
$(BUILD)/tests/qgz-check: tests/tools/qgz_check.c $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

# Every backend op on the CPU and the CUDA backend side by side (scripts/gpu-check.sh).
OP_CHECK_SRC := $(wildcard tests/tools/op_check/*.c)
$(BUILD)/tests/op-check: $(OP_CHECK_SRC) tests/tools/op_check/op_check.h $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(OP_CHECK_SRC) $(BUILD)/libzt.a $(LDLIBS)

# engine/cuda/mma.cuh's primitives on a GPU against tests/cudasim/sim_test_mma.cu's
# scalar references (scripts/gpu-lease.sh run starts with it).
MMA_CHECK_SRC := tests/tools/mma_check.cu tests/cudasim/sim_test_mma.cu
$(BUILD)/tests/mma-check: $(MMA_CHECK_SRC) tests/cudasim/sim_test.h engine/cuda/mma.cuh
	@mkdir -p $(dir $@)
	$(NVCC) $(filter-out -Xptxas -v,$(NVCCFLAGS)) -o $@ $(MMA_CHECK_SRC)

unit-test: $(UNIT_BIN) $(TOOLS)
# `make tests` would otherwise name the tests/ folder and do nothing.
tests: unit-test

deps:
	@bash scripts/install-deps.sh

# cuobjdump and nvdisasm for the SASS audit, from PyPI (the toolkit here has
# neither); make test needs them where nvcc builds the CUDA objects.
CUDA_TOOLS := $(BUILD)/tools/cuda/bin/cuobjdump
$(CUDA_TOOLS): scripts/cuda-tools.txt scripts/get-cuda-tools.sh
	@bash scripts/get-cuda-tools.sh $(BUILD)/tools/cuda

test: all unit-test sim $(if $(NVCC),$(CUDA_TOOLS))
	@bash tests/run.sh

# docs/gpu-audit.md: every kernel's registers, spills, occupancy and
# instruction mix from the built objects, launched as the simulator runs them.
gpu-audit: all sim $(CUDA_TOOLS)
	@bash scripts/gpu-audit.sh report

run: deps
	@$(MAKE) --no-print-directory all
	@bash scripts/run-default.sh

bench: all $(BUILD)/bench-sgemm $(BUILD)/bench-adam
	@bash scripts/bench-cpu.sh

# The MPI comm against plain MPI, and backward with and without overlap_comm.
bench-comm: $(BIN) $(BUILD)/bench-comm
	@bash scripts/bench-comm.sh

# ---- Sanitizers and fuzzing (README, Tests). ----
# make sanitize: the binary, the unit tests and the test tools with ASan +
# UBSan (gcc through mpicc) in build/asan/, then tests/sanitize/run.sh runs
# them. CPU only (NO_CUDA=1): nvcc's code is not instrumented, and the CUDA
# backend needs a GPU to run.
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SAN_OPT    := -O1 -march=x86-64-v2 -fno-math-errno
sanitize: sanitize-build
	@bash tests/sanitize/run.sh

sanitize-build:
	@$(MAKE) --no-print-directory BUILD=build/asan BIN=build/asan/zerotrain NO_CUDA=1 \
	    OPT="$(SAN_OPT)" SAN_FLAGS="$(ASAN_FLAGS)" \
	    build/asan/zerotrain unit-test build/asan/tests/tokenize-tool

# make fuzz [FUZZ_SECONDS=N]: the libFuzzer harnesses of tests/fuzz/ (clang
# through mpicc, the engine rebuilt with the fuzz flags in build/fuzz/), each
# run N seconds from its seed corpus by tests/fuzz/run.sh. clang's -fopenmp
# links LLVM's libomp (libomp-dev). clang (unlike gcc) warns that the
# registry's INT64_MAX bounds round up to 2^63 as doubles: that warning alone
# is silenced there.
FUZZ_SECONDS ?= 30
FUZZ_FLAGS := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer \
              -fno-sanitize-recover=undefined
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
fuzz: fuzz-build
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_NAMES)

fuzz-build:
	@OMPI_CC=clang $(MAKE) --no-print-directory BUILD=build/fuzz NO_CUDA=1 \
	    WARN="$(WARN) -Wno-implicit-const-int-float-conversion" \
	    OPT="$(SAN_OPT)" SAN_FLAGS="$(FUZZ_FLAGS)" \
	    $(FUZZ_NAMES:%=build/fuzz/fuzz_%)

$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/common.c tests/fuzz/common.h $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $< tests/fuzz/common.c $(BUILD)/libzt.a $(LDLIBS)

# The short bench (MLP and small transformers, np 1 and 2, ZeRO stages at np 2),
# 3 rounds: fails when a zerotrain/PyTorch or stage k/stage 0 ratio falls more
# than 20% below scripts/bench-baseline.json. Not part of `make test`.
bench-check: $(BIN) $(BUILD)/bench-sgemm
	@bash scripts/bench-cpu.sh check

clean:
	rm -rf $(BUILD) zerotrain

# ---- make sim: the CUDA backend (engine/cuda) and the NCCL comm built against
# the CPU simulator of tests/cudasim (docs/simulator.md): no GPU, no
# CUDA toolkit. Everything else is the same source, compiled apart in
# $(SIM). The .cu files are host C++17: FP contraction off (their
# __fmul_rn/__fadd_rn must round like CUDA's), #pragma unroll is nvcc's, GCC
# calls constexpr locals that only a nested lambda's template arguments use
# (ZT_LAUNCH inside row_dispatch) set but unused, and it cannot follow the
# row caches' fill-then-get under one condition (cuda_nn.cuh) through device
# code it never saw before (maybe-uninitialized). GCC's -fsanitize=thread
# instrumentation lets the simulator see every memory
# access of a kernel (tests/cudasim/sim/racecheck.cc defines its calls; the
# ThreadSanitizer runtime is not linked).
SIM          := $(BUILD)/sim
SIM_CXX      ?= mpicxx
SIM_DEFS     := -DZT_HAVE_CUDA -DZT_HAVE_NCCL -DZT_CUDASIM -Itests/cudasim/include \
                $(if $(OPENBLAS_DIR),-I$(subst /lib/,/include/,$(OPENBLAS_DIR))) \
                -DZT_VERSION=\"$(VERSION)\"
# SIM_HOOKS: the kernels' access hooks; SIM_SAN: sanitizers (make sim-sanitize).
SIM_HOOKS    ?= -fsanitize=thread --param tsan-instrument-func-entry-exit=0
SIM_SAN      ?=
SIM_CFLAGS   := $(CSTD) $(WARN) $(OPT) -g -fopenmp -iquote . $(SIM_DEFS) $(SIM_SAN)
SIM_CXXFLAGS := -std=c++17 $(WARN) $(OPT) -g -ffp-contract=off -iquote . $(SIM_DEFS) $(SIM_SAN)
SIM_CUFLAGS  := -x c++ $(SIM_CXXFLAGS) -Wno-unknown-pragmas -Wno-unused-but-set-variable \
                -Wno-maybe-uninitialized $(SIM_HOOKS)
comma        := ,
SIM_LDLIBS   := $(if $(OPENBLAS_DIR),-L$(OPENBLAS_DIR) -Wl$(comma)-rpath$(comma)$(OPENBLAS_DIR)) \
                -ljansson -lopenblas -luring -lm -lstdc++
SIM_SRC      := $(filter-out engine/comm/nccl_absent.c engine/cuda/cuda_absent.c,\
                  $(wildcard engine/*.c engine/*/*.c models/*.c data/*.c))
SIM_OBJ      := $(SIM_SRC:%.c=$(SIM)/%.o) $(patsubst %.cu,$(SIM)/%.o,$(wildcard engine/cuda/*.cu))
SIM_CMD_OBJ  := $(patsubst %.c,$(SIM)/%.o,$(wildcard cmd/*.c))
SIM_LIB_OBJ  := $(patsubst %.cc,$(SIM)/%.o,$(wildcard tests/cudasim/sim/*.cc))
SIM_LIBS     := $(SIM)/libzt.a $(SIM)/libzs.a

sim: $(SIM)/zerotrain $(SIM)/op-check $(SIM)/sim-test

$(SIM)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(SIM_CFLAGS) -MMD -MP -c $< -o $@

$(SIM)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(SIM_CXX) $(SIM_CUFLAGS) -MMD -MP -c $< -o $@

$(SIM)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(SIM_CXX) $(SIM_CXXFLAGS) -MMD -MP -c $< -o $@

$(SIM)/libzt.a: $(SIM_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SIM)/libzs.a: $(SIM_LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SIM)/zerotrain: $(SIM_CMD_OBJ) $(SIM_LIBS)
	$(CC) $(SIM_CFLAGS) -o $@ $^ $(SIM_LDLIBS)

$(SIM)/op-check: $(OP_CHECK_SRC) tests/tools/op_check/op_check.h $(SIM_LIBS)
	$(CC) $(SIM_CFLAGS) -o $@ $(OP_CHECK_SRC) $(SIM_LIBS) $(SIM_LDLIBS)

# make sim-sanitize: the simulator build with ASan + UBSan in build/sim-asan
# (kernels included), then tests/cudasim/asan.sh runs op-check and training
# on it. GCC cannot combine ASan with the ThreadSanitizer instrumentation the
# race checker's access hooks come from, so this build has no hooks: ASan
# checks the kernels' host-memory accesses (shared memory, locals, argument
# copies) and the simulator itself, the normal sim build the device memory.
sim-sanitize:
	@$(MAKE) --no-print-directory SIM=build/sim-asan SIM_HOOKS= OPT="$(SAN_OPT)" \
	    SIM_SAN="$(ASAN_FLAGS)" build/sim-asan/zerotrain build/sim-asan/op-check
	@bash tests/cudasim/asan.sh

# The simulator's own tests (tests/cudasim/test_sim.sh runs its cases).
SIM_TEST_OBJ := $(patsubst %.cu,$(SIM)/%.o,$(wildcard tests/cudasim/*.cu))
$(SIM)/sim-test: $(SIM_TEST_OBJ) $(SIM)/libzs.a
	$(SIM_CXX) $(SIM_CXXFLAGS) -o $@ $^ $(SIM_LDLIBS)

-include $(ENGINE_OBJ:.o=.d) $(CMD_OBJ:.o=.d) $(SIM_OBJ:.o=.d) $(SIM_CMD_OBJ:.o=.d) \
         $(SIM_LIB_OBJ:.o=.d) $(SIM_TEST_OBJ:.o=.d)
