# Environment of the AddressSanitizer + UndefinedBehaviorSanitizer runs
# (tests/sanitize/run.sh; source it to run a build/asan/ binary by hand).
#
# - Leak detection stays on. Open MPI's own leaks are suppressed by
#   tests/sanitize/lsan.supp, which names functions in their allocation
#   stacks. Stacks are unwound the slow way (fast_unwind_on_malloc=0): the
#   frame-pointer unwinder stops at the first Open MPI frame built without
#   frame pointers, inside a plugin that Open MPI has unloaded (dlclose) by
#   the time LeakSanitizer reports, so no name would be left to match; the
#   slow unwinder reaches MPI_Init/MPI_Finalize in libmpi. It makes MPI_Init
#   about 3 s slower under ASan.
# - allocator_may_return_null=1: a huge malloc returns NULL as it does without
#   ASan (the unit tests check that zerotrain reports an allocation failure;
#   ASan would abort instead).
# - UBSan stops at the first finding (-fno-sanitize-recover=undefined in the
#   build) and prints its stack. Nothing in Open MPI or OpenBLAS needs an
#   ASan or UBSan suppression (they are not instrumented).
ZT_SAN_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:fast_unwind_on_malloc=0
export LSAN_OPTIONS=suppressions=$ZT_SAN_DIR/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
