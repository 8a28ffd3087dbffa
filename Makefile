# zerotrain build. `make` builds ./zerotrain (CPU backend always); `make test`
# runs every test; `make run` installs deps, builds and trains the default model.

CC       := mpicc
PYTHON   := /usr/bin/python3
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror
OPT      ?= -O3 -march=x86-64-v2 -fno-math-errno
CFLAGS   += $(CSTD) $(WARN) $(OPT) -g -fopenmp -iquote . -iquote engine -iquote models -iquote data
# The OpenMP build of OpenBLAS shares our OpenMP thread pool; the pthread build
# would run its own threads that fight our idle-spinning OpenMP threads.
OPENBLAS_DIR ?= $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp))
ifneq ($(OPENBLAS_DIR),)
CFLAGS   += -I$(subst /lib/,/include/,$(OPENBLAS_DIR))
LDLIBS   += -L$(OPENBLAS_DIR) -Wl,-rpath,$(OPENBLAS_DIR)
endif
LDLIBS   += -ljansson -lopenblas -lm
VERSION  := 0.1.0
CFLAGS   += -DZT_VERSION=\"$(VERSION)\"

BUILD    := build

# GPU toolkit detection. The CUDA backend itself comes with a later change; the
# Makefile already reports what it would build against.
NO_CUDA   ?= 0
CUDA_HOME ?= /usr/local/cuda
NCCL_HOME ?= $(CUDA_HOME)
NVCC      := $(shell [ "$(NO_CUDA)" = 1 ] || command -v $(CUDA_HOME)/bin/nvcc 2>/dev/null || command -v nvcc 2>/dev/null)
HAVE_CUBLAS := $(shell [ -n "$(NVCC)" ] && ls $(CUDA_HOME)/lib64/libcublas.so* >/dev/null 2>&1 && echo 1)
HAVE_NCCL   := $(shell [ -n "$(NVCC)" ] && (ls $(NCCL_HOME)/lib64/libnccl.so* $(NCCL_HOME)/lib/libnccl.so* /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null | grep -q nccl) && echo 1)

ENGINE_SRC := $(wildcard engine/*.c engine/cpu/*.c models/*.c data/*.c)
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/%.o)
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all deps test unit-test run clean toolkit bench
all: toolkit zerotrain

toolkit:
	@echo "zerotrain: CPU backend: OpenBLAS ($(if $(OPENBLAS_DIR),$(OPENBLAS_DIR),system default: install libopenblas-openmp-dev for the OpenMP build)) + OpenMP (always built)"
	@if [ -n "$(NVCC)" ]; then echo "zerotrain: found nvcc at $(NVCC)$(if $(HAVE_CUBLAS), with cuBLAS,)$(if $(HAVE_NCCL), with NCCL,); CUDA backend: not built yet (arrives with the CUDA backend)"; \
	 else echo "zerotrain: no nvcc found (CUDA_HOME=$(CUDA_HOME), NO_CUDA=$(NO_CUDA)): CPU-only build"; fi

zerotrain: $(BUILD)/cmd/zerotrain.o $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libzt.a: $(ENGINE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS) -lcmocka

$(BUILD)/bench-sgemm: scripts/bench_sgemm.c $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

$(BUILD)/bench-adam: scripts/bench_adam.c $(BUILD)/libzt.a
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

$(BUILD)/tests/tokenize-tool: tests/tools/tokenize_main.c $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

# Run by tests/mpi/test_comm_dtypes.sh under mpirun.
$(BUILD)/tests/comm-check: tests/tools/comm_check.c $(BUILD)/libzt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libzt.a $(LDLIBS)

unit-test: $(UNIT_BIN) $(BUILD)/tests/comm-check

deps:
	@bash scripts/install-deps.sh

test: all unit-test
	@bash tests/run.sh

run: deps
	@$(MAKE) --no-print-directory all
	@bash scripts/run-default.sh

bench: all $(BUILD)/bench-sgemm $(BUILD)/bench-adam
	@bash scripts/bench-cpu.sh

clean:
	rm -rf $(BUILD) zerotrain

-include $(ENGINE_OBJ:.o=.d) $(BUILD)/cmd/zerotrain.d
