/* Plugins that are wrong as plugins (not as kernels): each build (-DBAD=...) breaks one rule of
 * <flashcheck/plugin.h> that the loader must refuse with one line (exit 2). */
#include <flashcheck/plugin.h>
#include <stddef.h>

#define NO_SYMBOL 0 /* macros, not an enum: BAD is also tested by #if */
#define NULL_KERNEL 1
#define OLD_ABI 2
#define NULL_FORWARD 3
#define NULL_SUPPORTS 4
#define BAD_DEVICE 5
#define BAD_NAME 6
#define DECLINES_ALL 7
#define CRASHES_IN_SUPPORTS 8
#define BAD_RESIDUE 9 /* declarations.n_k = {multiple_of 64, residue 64} */
#define EMPTY_LENGTHS 10 /* declarations.n_q = {multiple_of 64, min 65, max 100}: no length */

static const fc_declarations declarations = {
    .n_q = {.multiple_of = 64, .min = BAD == EMPTY_LENGTHS ? 65 : 0, .max = BAD == EMPTY_LENGTHS ? 100 : 0},
    .n_k = {.multiple_of = 64, .residue = BAD == BAD_RESIDUE ? 64 : 0},
};

static int supports(const fc_problem *p, const fc_forward_args *a) {
  (void)a;
  if (BAD == CRASHES_IN_SUPPORTS) return *(volatile int *)(size_t)8 + p->d;
  return BAD != DECLINES_ALL;
}
static int forward(const fc_problem *p, const fc_forward_args *a, void *s) {
  (void)p, (void)a, (void)s;
  return 0;
}

static const fc_kernel kernel = {BAD == OLD_ABI ? 1 : FC_ABI_VERSION,
                                 BAD == BAD_NAME ? "two words" : "bad_plugin",
                                 BAD == BAD_DEVICE ? 7 : kDLCPU,
                                 1,
                                 BAD == NULL_SUPPORTS ? NULL : supports,
                                 BAD == NULL_FORWARD ? NULL : forward,
                                 NULL,
                                 NULL,
                                 BAD == BAD_RESIDUE || BAD == EMPTY_LENGTHS ? &declarations : NULL};

#if BAD == NO_SYMBOL
const fc_kernel *some_other_symbol(void) { return &kernel; }
#else
const fc_kernel *flashcheck_kernel(void) { return BAD == NULL_KERNEL ? NULL : &kernel; }
#endif
