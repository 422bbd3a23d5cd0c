# embtier - plain GNU make. `make help` lists the targets.
#
# Everything is built under $(BUILD) (default build/); sanitizer builds use
# their own directories and libc malloc instead of jemalloc.

SHELL := /bin/bash

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCDIR ?= $(PREFIX)/include
BINDIR ?= $(PREFIX)/bin
PKGDIR ?= $(LIBDIR)/pkgconfig
DESTDIR ?=

BUILD ?= build
SAN ?=
NO_JEMALLOC ?=

VERSION := 0.1.0
SOMAJOR := 0
SONAME := libembtier.so.$(SOMAJOR)

CC ?= cc
PKG_CONFIG ?= pkg-config
DEPS := liburing libxxhash
ifeq ($(NO_JEMALLOC),)
DEPS += jemalloc
endif

CFLAGS ?= -O2 -g
# libembtier's source, by layer from the top (docs/ARCHITECTURE.md): the
# API, the store's engine, the caches, the disk layer, io, the base.
SRC_DIRS := src/api src/store src/cache src/disk src/io src/base
SRC_INC := $(SRC_DIRS:%=-I%)
ET_CFLAGS := -std=gnu11 -D_GNU_SOURCE -ffp-contract=off -Wall -Wextra -Wshadow -Wno-unused-parameter \
	-Wstrict-prototypes -Wmissing-prototypes -fPIC -pthread \
	-Iinclude $(SRC_INC) -MMD -MP $(shell $(PKG_CONFIG) --cflags $(DEPS))
ET_LDLIBS := $(shell $(PKG_CONFIG) --libs $(DEPS)) -lm -pthread
ifneq ($(NO_JEMALLOC),)
ET_CFLAGS += -DET_NO_JEMALLOC
endif
ifneq ($(SAN),)
ET_CFLAGS += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
ET_LDFLAGS += -fsanitize=$(SAN)
endif

CMOCKA_CFLAGS := $(shell $(PKG_CONFIG) --cflags cmocka 2>/dev/null)
CMOCKA_LIBS := $(shell $(PKG_CONFIG) --libs cmocka 2>/dev/null || echo -lcmocka)

ifeq ($(V),1)
Q :=
msg = @true
else
Q := @
msg = @printf '  %-8s %s\n' $(1) $(2)
endif

LIB_SRCS := $(wildcard $(SRC_DIRS:%=%/*.c))
LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)

# CUDA=1: the HBM tier in real device memory (src/cache/mem_hbm_cuda.cu).
CUDA ?=
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
ifneq ($(CUDA),)
LIB_OBJS += $(BUILD)/src/cache/mem_hbm_cuda.o
ET_CFLAGS += -DET_HAVE_CUDA
ET_LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart -Wl,-rpath,$(CUDA_HOME)/lib64
endif
STATIC := $(BUILD)/libembtier.a
SHARED := $(BUILD)/libembtier.so.$(VERSION)
LD ?= ld
OBJCOPY ?= objcopy

TOOL_COMMON_SRCS := $(filter-out tools/build.c tools/inspect.c,$(wildcard tools/*.c))
TOOL_COMMON_OBJS := $(TOOL_COMMON_SRCS:%.c=$(BUILD)/%.o)
TOOLS := $(BUILD)/embtier-build $(BUILD)/embtier-inspect

TRAIN_SRCS := $(wildcard tools/train/*.c)
TRAIN_OBJS := $(TRAIN_SRCS:%.c=$(BUILD)/%.o)
BENCH_SRCS := $(wildcard bench/*.c)
BENCH_OBJS := $(BENCH_SRCS:%.c=$(BUILD)/%.o)
ifneq ($(TRAIN_SRCS),)
TOOLS += $(BUILD)/embtier-train
endif
ifneq ($(BENCH_SRCS),)
BENCH := $(BUILD)/embtier-bench
endif
BLAS_CFLAGS := $(shell $(PKG_CONFIG) --cflags openblas 2>/dev/null)
BLAS_LIBS := $(shell $(PKG_CONFIG) --libs openblas 2>/dev/null || echo -lopenblas)
# RocksDB is a benchmark peer only, used when its headers are installed.
ROCKSDB := $(shell test -f /usr/include/rocksdb/c.h && echo 1)
ifeq ($(ROCKSDB),1)
BENCH_CFLAGS := -DET_HAVE_ROCKSDB
BENCH_LIBS := -lrocksdb
endif

# MPI: libembtier_mpi (src/mpi/, include/embtier_mpi.h) and
# embtier-train-mpi, built when an MPI compiler wrapper is found; the core
# library and the plain trainer never depend on MPI.
MPICC ?= mpicc
MPIRUN ?= mpirun
HAVE_MPI := $(shell command -v $(MPICC) >/dev/null 2>&1 && echo 1)
MPI_SRCS := $(wildcard src/mpi/*.c)
MPI_OBJS := $(MPI_SRCS:%.c=$(BUILD)/%.o)
MPI_LIB := $(BUILD)/libembtier_mpi.a
MPI_SONAME := libembtier_mpi.so.$(SOMAJOR)
MPI_SHARED := $(BUILD)/libembtier_mpi.so.$(VERSION)
MPI_PC := $(BUILD)/embtier_mpi.pc
MPI_TRAIN_OBJS := $(TRAIN_SRCS:%.c=$(BUILD)/mpi-train/%.o) \
	$(BUILD)/mpi-train/tools/train/mpi/dist.o
MPI_TEST := $(BUILD)/tests/mpi/test_mpi
ifeq ($(HAVE_MPI),1)
MPI_ALL := $(MPI_LIB) $(MPI_SHARED) $(MPI_PC) $(BUILD)/embtier-train-mpi $(MPI_TEST)
# embtier_mpi.pc names MPI's own pkg-config module (Debian's mpi-c
# alternative, Open MPI's ompi-c, MPICH's mpich), else Open MPI's flags
MPI_PC_MODULE := $(firstword $(foreach p,mpi-c ompi-c mpich,$(shell \
	$(PKG_CONFIG) --exists $(p) 2>/dev/null && echo $(p))))
ifeq ($(MPI_PC_MODULE),)
MPI_PC_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null)
MPI_PC_LIBS := $(shell $(MPICC) --showme:link 2>/dev/null)
endif
endif

TEST_SRCS := $(wildcard tests/test_*.c)
TESTS := $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)
TEST_HELPER_SRCS := $(filter-out $(TEST_SRCS),$(wildcard tests/*.c))
TEST_HELPER_OBJS := $(TEST_HELPER_SRCS:%.c=$(BUILD)/%.o)

.PHONY: FORCE all lib tools bench demo mpi test-mpi cuda fuzz fuzz-run fuzz-bins tests test asan ubsan tsan install uninstall format \
	format-check check-docs check-symbols check-pip clean help python

all: lib tools $(BENCH) $(MPI_ALL) ## Build the library, the tools and the benchmark (default)

lib: $(STATIC) $(SHARED) $(BUILD)/embtier.pc ## Build libembtier.a, .so and embtier.pc

tools: $(TOOLS) ## Build embtier-build and embtier-inspect

tests: $(TESTS) $(TOOLS) $(BENCH)

# T="test_a test_b" runs only those programs; T=python only the Python
# package's pytest tests, which the full suite runs last (not in sanitizer
# builds: the interpreter does not load their runtimes).
RUN_TESTS := $(if $(T),$(addprefix $(BUILD)/tests/,$(filter-out python,$(T))),$(TESTS))
PY_TESTS := $(if $(SAN),,$(if $(T),$(if $(filter python,$(T)),python/tests),python/tests))

test: $(RUN_TESTS) $(TOOLS) $(BENCH) $(if $(PY_TESTS),python) ## Build and run the test suite (T="test_x ..." for some, T=python)
	$(Q)BUILD=$(BUILD) ET_PYTEST=$(PY_TESTS) ET_PYTHON=$(PYTHON) tests/run.sh $(RUN_TESTS)

# The Python package (python/embtier) loads the library with dlopen(),
# which Debian's jemalloc refuses (initial-exec TLS): `make python` builds
# it again in build-python/ with libc malloc, the package's table-batched
# calls (python/embtier/_tables.c) and the C side of its benchmark
# (python/bench_overhead.py), both linked to that same .so.
PYTHON ?= /usr/bin/python3
PYBUILD := build-python

python: ## Build the library for the Python package (in build-python/)
	$(Q)$(MAKE) --no-print-directory BUILD=$(PYBUILD) NO_JEMALLOC=1 SAN= \
		lib $(PYBUILD)/python/libc_baseline.so \
		$(PYBUILD)/python/libembtier_tables.so \
		$(PYBUILD)/python/_embtier_fast.so

$(BUILD)/python/libembtier_tables.so: python/embtier/_tables.c $(SHARED)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(ET_CFLAGS) $(CFLAGS) -shared -o $@ $< -L$(BUILD) -lembtier \
		-Wl,-rpath,'$$ORIGIN/..' $(ET_LDFLAGS) $(LDFLAGS)

# The CPython extension the module's step calls go through (no library
# link: python/embtier/_abi.py binds it to _tables.c's functions).
$(BUILD)/python/_embtier_fast.so: python/embtier/_fast.c
	$(call msg,LD,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(ET_CFLAGS) $(CFLAGS) -I$(shell $(PYTHON) -c \
		'import sysconfig; print(sysconfig.get_paths()["include"])') \
		-shared -o $@ $< $(LDFLAGS)

$(BUILD)/python/libc_baseline.so: python/bench/c_baseline.c $(SHARED)
	$(call msg,LD,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(ET_CFLAGS) $(CFLAGS) -shared -o $@ $< -L$(BUILD) -lembtier \
		-Wl,-rpath,'$$ORIGIN/..' $(ET_LDFLAGS) $(LDFLAGS)

demo: all ## The main job: a short training run over a huge lazy table
ifneq ($(TRAIN_SRCS),)
	$(BUILD)/embtier-train --preset default
else
	@d=$$(mktemp -d /var/tmp/embtier-demo.XXXXXX) && \
	$(BUILD)/embtier-build --rows 2^33 --dim 128 --init uniform $$d/big.et && \
	$(BUILD)/embtier-inspect $$d/big.et; rm -rf $$d
endif

asan: ## Build and run the tests with ASan+UBSan (in build-asan/)
	$(Q)$(MAKE) --no-print-directory BUILD=build-asan SAN=address,undefined NO_JEMALLOC=1 test

ubsan: ## Build and run the tests with UBSan alone (in build-ubsan/)
	$(Q)$(MAKE) --no-print-directory BUILD=build-ubsan SAN=undefined NO_JEMALLOC=1 test

tsan: ## Build and run the tests with TSan (in build-tsan/; T= as for test)
	$(Q)$(MAKE) --no-print-directory BUILD=build-tsan SAN=thread NO_JEMALLOC=1 test

$(BUILD)/%.o: %.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(ET_CFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/src/%.o: src/%.cu
	$(call msg,NVCC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(NVCC) -O2 -Xcompiler -fPIC -Iinclude $(SRC_INC) \
		-Xcompiler -fvisibility=hidden -DET_BUILD \
		$(shell $(PKG_CONFIG) --cflags libxxhash) -DET_HAVE_CUDA -c -o $@ $<

# libFuzzer targets: fuzz/fuzz_NAME.c -> build-fuzz/fuzz/fuzz_NAME, seeds in
# fuzz/corpus/NAME/. FUZZ_LINK_NAME lists extra objects a target needs.
FUZZ_SRCS := $(wildcard fuzz/fuzz_*.c)
FUZZ_BINS := $(FUZZ_SRCS:fuzz/%.c=$(BUILD)/fuzz/%)
FUZZ ?=
ifneq ($(FUZZ),)
ET_CFLAGS += -fsanitize=fuzzer-no-link
endif
FUZZ_TIME ?= 20

fuzz: ## Build the libFuzzer targets with clang (in build-fuzz/)
	$(Q)$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang \
		SAN=address,undefined NO_JEMALLOC=1 FUZZ=1 fuzz-bins

fuzz-run: fuzz ## Run each fuzz target for FUZZ_TIME seconds from its seeds
	$(Q)for f in $(FUZZ_SRCS:fuzz/%.c=%); do \
		n=$${f#fuzz_}; mkdir -p build-fuzz/corpus/$$n; \
		echo "fuzzing $$n for $(FUZZ_TIME) s"; \
		build-fuzz/fuzz/$$f -max_total_time=$(FUZZ_TIME) -max_len=65536 \
			-print_final_stats=1 build-fuzz/corpus/$$n fuzz/corpus/$$n \
			2>&1 | grep -E "stat::number_of_executed_units|ERROR|SUMMARY|crash-" \
			|| exit 1; \
		test "$${PIPESTATUS[0]}" = 0 || exit 1; \
	done

fuzz-bins: $(FUZZ_BINS)

# a target that includes another's source is rebuilt when that changes
$(BUILD)/fuzz/fuzz_rowlog_keyed: fuzz/fuzz_rowlog.c fuzz/fuzz_store.h

FUZZ_LINK_criteo := $(BUILD)/tools/train/data.o
FUZZ_LINK_trace := $(BUILD)/bench/workload.o

.SECONDEXPANSION:
$(BUILD)/fuzz/fuzz_%: fuzz/fuzz_%.c $(STATIC) $$(FUZZ_LINK_$$*)
	$(call msg,FUZZ,$@)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(ET_CFLAGS) -Itools -Ibench $(CFLAGS) -fsanitize=fuzzer -o $@ $< \
		$(FUZZ_LINK_$*) $(STATIC) $(ET_LDFLAGS) $(ET_LDLIBS)

cuda: ## Build with the CUDA HBM tier (in build-cuda/; needs nvcc)
	$(Q)$(MAKE) --no-print-directory BUILD=build-cuda CUDA=1 all

# The library's objects hide every symbol the header does not mark ET_API
# (they depend on this file, where their flags are)
$(LIB_OBJS): ET_CFLAGS += -DET_BUILD -fvisibility=hidden
$(LIB_OBJS): Makefile

# The archive holds one object, the library partially linked with its
# hidden (non-API) symbols made local: a program linking libembtier.a cannot
# collide with the library's internals. Tests, which reach
# the internals, link $(LIB_OBJS) instead.
$(BUILD)/embtier.o: $(LIB_OBJS)
	$(call msg,LD,$@)
	$(Q)$(LD) -r -o $@.tmp $^
	$(Q)$(OBJCOPY) --localize-hidden $@.tmp $@ && rm -f $@.tmp

$(STATIC): $(BUILD)/embtier.o
	$(call msg,AR,$@)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

# The only symbols the library may define for others: the API (et_).
check-link: lib ## Install to a scratch prefix; link a program through pkg-config, shared and -static, and run both
	$(Q)BUILD=$(BUILD) scripts/check_link.sh

# The Python package as pip installs it (python/pyproject.toml, setup.py).
check-pip: ## Install to a scratch prefix; pip-install python/ offline into a venv, and use it from outside the repository
	$(Q)BUILD=$(BUILD) PYTHON=$(PYTHON) scripts/check_pip.sh

# libembtier_mpi (when built) may define its header's ETM_API functions,
# all etm_, and every one of them.
CHECK_MPI := $(if $(filter 1,$(HAVE_MPI)),1)
check-symbols: $(STATIC) $(SHARED) $(if $(CHECK_MPI),$(MPI_LIB) $(MPI_SHARED)) ## Fail if a library exports a symbol outside its API (et_, etm_)
	$(Q)bad=$$( { nm -D --defined-only $(SHARED); \
		nm -g --defined-only $(STATIC); } | \
		awk 'NF == 3 && $$3 !~ /^et_/ && \
		$$3 !~ /^(_init|_fini|__bss_start|_edata|_end)$$/ { print $$3 }'); \
	if [ -n "$$bad" ]; then \
		echo "symbols outside the et_ API:" $$bad >&2; exit 1; \
	fi; \
	msg="$$(nm -D --defined-only $(SHARED) | grep -c ' et_') et_ symbols exported by libembtier"; \
	if [ -n "$(CHECK_MPI)" ]; then \
		export LC_ALL=C; \
		api=$$(sed -nE 's/^ETM_API[^(]*[ *]([A-Za-z0-9_]+)\(.*/\1/p' \
			include/embtier_mpi.h | sort -u); \
		so=$$(nm -D --defined-only $(MPI_SHARED) | awk 'NF == 3 && \
			$$3 !~ /^(_init|_fini|__bss_start|_edata|_end)$$/ { print $$3 }' | sort -u); \
		ar=$$(nm -g --defined-only $(MPI_LIB) | awk 'NF == 3 { print $$3 }' | sort -u); \
		bad=$$(grep -v '^etm_' <<<"$$api"; \
			comm -13 <(echo "$$api") <(printf '%s\n' "$$so" "$$ar" | sort -u)); \
		if [ -n "$$bad" ]; then \
			echo "symbols outside the etm_ API (include/embtier_mpi.h's ETM_API functions):" $$bad >&2; \
			exit 1; \
		fi; \
		bad=$$(comm -23 <(echo "$$api") <(echo "$$so"); comm -23 <(echo "$$api") <(echo "$$ar")); \
		if [ -n "$$bad" ]; then \
			echo "declared ETM_API but not exported by libembtier_mpi:" $$bad >&2; exit 1; \
		fi; \
		msg="$$msg, $$(grep -c . <<<"$$so") etm_ by libembtier_mpi (its header's ETM_API functions)"; \
	fi; \
	echo "check-symbols: $$msg, nothing else"

$(SHARED): $(LIB_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) $(ET_LDFLAGS) $(LDFLAGS) -o $@ $^ $(ET_LDLIBS)
	$(Q)ln -sf libembtier.so.$(VERSION) $(BUILD)/$(SONAME)
	$(Q)ln -sf $(SONAME) $(BUILD)/libembtier.so

# A static link needs the dependencies' libraries after -lembtier and -lm
# after jemalloc (which calls round()): they are listed here in that order,
# not through Requires.private, whose libraries pkg-config puts last.
PC_PRIVATE := $(shell $(PKG_CONFIG) --static --libs $(DEPS)) -lm -pthread -ldl

$(BUILD)/embtier.pc: Makefile FORCE
	$(call msg,GEN,$@)
	$(Q)mkdir -p $(BUILD)
	$(Q)printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCDIR)' '' \
		'Name: embtier' 'Description: tiered HBM/DDR/NVMe embedding store' \
		'Version: $(VERSION)' \
		'Libs: -L$${libdir} -lembtier' \
		'Libs.private: $(PC_PRIVATE)' \
		'Cflags: -I$${includedir}' > $@

$(BUILD)/embtier-build: $(BUILD)/tools/build.o $(TOOL_COMMON_OBJS) $(STATIC)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ET_LDFLAGS) $(LDFLAGS) -o $@ $^ $(ET_LDLIBS)

$(BUILD)/embtier-inspect: $(BUILD)/tools/inspect.o $(TOOL_COMMON_OBJS) $(STATIC)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ET_LDFLAGS) $(LDFLAGS) -o $@ $^ $(ET_LDLIBS)

$(BUILD)/embtier-train: $(TRAIN_OBJS) $(TOOL_COMMON_OBJS) $(STATIC)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ET_LDFLAGS) $(LDFLAGS) -o $@ $^ $(ET_LDLIBS) $(BLAS_LIBS)

$(BUILD)/tools/train/%.o: tools/train/%.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(ET_CFLAGS) -Itools $(BLAS_CFLAGS) $(CFLAGS) -c -o $@ $<

# The benchmark uses the library's API alone (its raw io_uring reads are
# its own, bench/rawio.c): it links the archive, as the tools do.
$(BUILD)/embtier-bench: $(BENCH_OBJS) $(TOOL_COMMON_OBJS) $(STATIC)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ET_LDFLAGS) $(LDFLAGS) -o $@ $^ $(ET_LDLIBS) $(BENCH_LIBS)

# Without $(SRC_INC): the benchmark sees the public header, not the library's.
$(BUILD)/bench/%.o: bench/%.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(filter-out $(SRC_INC),$(ET_CFLAGS)) -Itools $(BENCH_CFLAGS) $(CFLAGS) -c -o $@ $<

bench: $(BENCH) ## Build embtier-bench (RocksDB peer if librocksdb-dev is installed)

mpi: ## Build libembtier_mpi, embtier-train-mpi and the MPI test (needs mpicc)
ifneq ($(HAVE_MPI),1)
	@echo "mpi: $(MPICC) not found (Debian: openmpi-bin libopenmpi-dev)"; exit 1
endif
	$(Q)$(MAKE) -s --no-print-directory $(MPI_LIB) $(MPI_SHARED) $(MPI_PC) \
		$(BUILD)/embtier-train-mpi $(MPI_TEST)

test-mpi: mpi ## Run the MPI tests at 1, 2 and 4 ranks (mpirun)
	$(Q)BUILD=$(BUILD) MPIRUN=$(MPIRUN) tests/mpi/run.sh

# libembtier_mpi hides every symbol its header does not mark ETM_API, and
# its archive is one object with the rest made local, as libembtier's
$(BUILD)/src/mpi/%.o: src/mpi/%.c Makefile
	$(call msg,MPICC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)OMPI_CC=$(CC) $(MPICC) $(ET_CFLAGS) -DETM_BUILD -fvisibility=hidden \
		$(CFLAGS) -c -o $@ $<

$(BUILD)/embtier_mpi.o: $(MPI_OBJS)
	$(call msg,LD,$@)
	$(Q)$(LD) -r -o $@.tmp $^
	$(Q)$(OBJCOPY) --localize-hidden $@.tmp $@ && rm -f $@.tmp

$(MPI_LIB): $(BUILD)/embtier_mpi.o
	$(call msg,AR,$@)
	$(Q)rm -f $@ && $(AR) rcs $@ $^

$(MPI_SHARED): $(MPI_OBJS) $(SHARED)
	$(call msg,LD,$@)
	$(Q)OMPI_CC=$(CC) $(MPICC) -shared -Wl,-soname,$(MPI_SONAME) $(ET_LDFLAGS) \
		$(LDFLAGS) -o $@ $(MPI_OBJS) -L$(BUILD) -lembtier -lm
	$(Q)ln -sf libembtier_mpi.so.$(VERSION) $(BUILD)/$(MPI_SONAME)
	$(Q)ln -sf $(MPI_SONAME) $(BUILD)/libembtier_mpi.so

# Requires embtier and MPI: the header includes embtier.h and mpi.h, and
# programs call both
$(MPI_PC): Makefile FORCE
	$(call msg,GEN,$@)
	$(Q)mkdir -p $(BUILD)
	$(Q)printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCDIR)' '' \
		'Name: embtier_mpi' 'Description: embtier sharded over MPI ranks' \
		'Version: $(VERSION)' \
		'$(strip Requires: embtier $(MPI_PC_MODULE))' \
		'$(strip Libs: -L$${libdir} -lembtier_mpi $(MPI_PC_LIBS))' \
		'$(strip Cflags: -I$${includedir} $(MPI_PC_CFLAGS))' > $@

$(BUILD)/mpi-train/%.o: %.c
	$(call msg,MPICC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)OMPI_CC=$(CC) $(MPICC) $(ET_CFLAGS) -DET_WITH_MPI -Itools -Itools/train \
		$(BLAS_CFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/embtier-train-mpi: $(MPI_TRAIN_OBJS) $(TOOL_COMMON_OBJS) $(MPI_LIB) $(STATIC)
	$(call msg,LD,$@)
	$(Q)OMPI_CC=$(CC) $(MPICC) $(ET_LDFLAGS) $(LDFLAGS) -o $@ $^ $(ET_LDLIBS) $(BLAS_LIBS)

$(BUILD)/tests/mpi/%: tests/mpi/%.c $(MPI_LIB) $(STATIC)
	$(call msg,MPICC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)OMPI_CC=$(CC) $(MPICC) $(ET_CFLAGS) $(CFLAGS) -o $@ $< $(MPI_LIB) $(STATIC) \
		$(ET_LDFLAGS) $(ET_LDLIBS)

# test_bench links the benchmark's modules it tests (libc alone).
TEST_BENCH_OBJS := $(addprefix $(BUILD)/bench/,belady.o convert.o learner.o oracle.o \
	workload.o)
$(BUILD)/tests/test_bench: $(BUILD)/tests/test_bench.o $(TEST_HELPER_OBJS) \
		$(TEST_BENCH_OBJS) $(LIB_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ET_LDFLAGS) $(LDFLAGS) -o $@ $^ $(ET_LDLIBS) $(CMOCKA_LIBS)

# Tests reach internals (io.h, mem_host.h, ...): they link the objects.
$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_HELPER_OBJS) $(LIB_OBJS)
	$(call msg,LD,$@)
	$(Q)$(CC) $(ET_LDFLAGS) $(LDFLAGS) -o $@ $^ $(ET_LDLIBS) $(CMOCKA_LIBS)

$(BUILD)/tests/%.o: tests/%.c
	$(call msg,CC,$<)
	$(Q)mkdir -p $(dir $@)
	$(Q)$(CC) $(ET_CFLAGS) $(CMOCKA_CFLAGS) $(CFLAGS) -c -o $@ $<

# LIBDIR/embtier/ holds the library built with libc malloc (as by `make
# python`), which the pip-installed Python package loads (python/setup.py
# finds it through embtier.pc's libdir): out of the linker's path, so
# programs still link the jemalloc build.
install: all ## Install library, header, tools, embtier.pc, LIBDIR/embtier/ (for Python); libembtier_mpi, its header and embtier_mpi.pc if built (PREFIX, DESTDIR)
	$(Q)$(MAKE) --no-print-directory BUILD=$(PYBUILD) NO_JEMALLOC=1 SAN= lib
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(PKGDIR)
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED) $(DESTDIR)$(LIBDIR)/
	ln -sf libembtier.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libembtier.so
	install -m 644 include/embtier.h $(DESTDIR)$(INCDIR)/
	install -m 644 $(BUILD)/embtier.pc $(DESTDIR)$(PKGDIR)/
	install -m 755 $(TOOLS) $(BENCH) $(DESTDIR)$(BINDIR)/
	install -d $(DESTDIR)$(LIBDIR)/embtier
	install -m 755 $(PYBUILD)/libembtier.so.$(VERSION) $(DESTDIR)$(LIBDIR)/embtier/
	ln -sf libembtier.so.$(VERSION) $(DESTDIR)$(LIBDIR)/embtier/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/embtier/libembtier.so
ifeq ($(HAVE_MPI),1)
	install -m 644 $(MPI_LIB) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(MPI_SHARED) $(DESTDIR)$(LIBDIR)/
	ln -sf libembtier_mpi.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(MPI_SONAME)
	ln -sf $(MPI_SONAME) $(DESTDIR)$(LIBDIR)/libembtier_mpi.so
	install -m 644 include/embtier_mpi.h $(DESTDIR)$(INCDIR)/
	install -m 644 $(MPI_PC) $(DESTDIR)$(PKGDIR)/
endif

uninstall: ## Remove what install put in place
	rm -f $(DESTDIR)$(LIBDIR)/libembtier.a $(DESTDIR)$(LIBDIR)/libembtier.so*
	rm -f $(DESTDIR)$(INCDIR)/embtier.h $(DESTDIR)$(PKGDIR)/embtier.pc
	rm -f $(DESTDIR)$(LIBDIR)/libembtier_mpi.a $(DESTDIR)$(LIBDIR)/libembtier_mpi.so*
	rm -f $(DESTDIR)$(INCDIR)/embtier_mpi.h $(DESTDIR)$(PKGDIR)/embtier_mpi.pc
	rm -f $(TOOLS:$(BUILD)/%=$(DESTDIR)$(BINDIR)/%) $(DESTDIR)$(BINDIR)/embtier-bench
	rm -f $(DESTDIR)$(LIBDIR)/embtier/libembtier.so*
	[ ! -d $(DESTDIR)$(LIBDIR)/embtier ] || rmdir --ignore-fail-on-non-empty $(DESTDIR)$(LIBDIR)/embtier

C_SOURCES = include/*.h src/*/*.[ch] tools/*.[ch] tools/train/*.[ch] \
	tools/train/mpi/*.c bench/*.[ch] tests/*.[ch] tests/mpi/*.c fuzz/*.c \
	python/bench/*.c python/embtier/*.c

format: ## Format the C sources with clang-format
	clang-format -i $(C_SOURCES)

format-check: ## Fail if any C source is not formatted
	clang-format --dry-run -Werror $(C_SOURCES)

check-docs: ## Fail if docs/ misses a source file, or names a path or error code that is not there
	$(Q)scripts/check_docs.sh

clean: ## Remove every build directory
	rm -rf build build-asan build-ubsan build-tsan build-fuzz build-cuda build-python

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/' | expand -t16

.SECONDARY:

FORCE:

-include $(LIB_OBJS:.o=.d) $(TOOL_COMMON_OBJS:.o=.d) $(TRAIN_OBJS:.o=.d) \
	$(BENCH_OBJS:.o=.d) $(BUILD)/tools/build.d $(MPI_OBJS:.o=.d) \
	$(MPI_TRAIN_OBJS:.o=.d) \
	$(BUILD)/tools/inspect.d $(TESTS:=.d) $(TEST_HELPER_OBJS:.o=.d)
