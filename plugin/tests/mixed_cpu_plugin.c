/* The example host kernel (examples/plugin_cpu/attention_cpu.c: double arithmetic, each output rounded
 * once into its own tensor's dtype, forward and backward) declaring per-tensor dtypes, for flashcheck's
 * tests of the backward's per-tensor bounds: q F32 or BF16 beside an F16 K/V cache, o F32, and one
 * dtype for every tensor in F16. It declares no arithmetic: the undeclared charge at the coarsest type. */
#define flashcheck_kernel example_cpu_kernel
#include "../../examples/plugin_cpu/attention_cpu.c"
#undef flashcheck_kernel

static const fc_dtypes mixed[] = {
    {FC_DTYPE_F32, FC_DTYPE_F16, FC_DTYPE_F32}, {FC_DTYPE_BF16, FC_DTYPE_F16, FC_DTYPE_F32}, {FC_DTYPE_F16, FC_DTYPE_F16, FC_DTYPE_F16}};
static const fc_declarations mixed_declarations = {.dtypes = mixed, .num_dtypes = 3};
static fc_kernel with_dtypes;

FC_PLUGIN_EXPORT const fc_kernel *flashcheck_kernel(void) {
  with_dtypes = *example_cpu_kernel();
  with_dtypes.declarations = &mixed_declarations;
  return &with_dtypes;
}
