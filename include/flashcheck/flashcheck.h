/* flashcheck's C API (libflashcheck.so): the property suite for a program that embeds it, such as the
 * Python bridge (python/flashcheck, pure ctypes over these functions). A kernel is an fc_kernel of
 * <flashcheck/plugin.h>, built by the caller (callbacks in the caller's language) or served by a
 * worker process the suite starts. */
#ifndef FLASHCHECK_FLASHCHECK_H_
#define FLASHCHECK_FLASHCHECK_H_

#include <flashcheck/plugin.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Receives the report's text as it is produced (the caller prints or keeps it). */
typedef void (*flashcheck_write_fn)(const char *text, size_t size, void *ctx);

/* `flashcheck check` or `flashcheck audit` on one kernel: either `kernel` (run in this process; its
 * callbacks are called from the suite's threads, one call at a time) or, with kernel == NULL, the
 * kernel served by the worker command `worker_argv` (NULL-terminated; the command calls
 * flashcheck_serve), restarted after each fault. argv[0] is "check" or "audit", the rest that
 * command's options as the CLI takes them (argc in all). Replay lines start with `replay_prefix`, in
 * which "{cmd}" stands for the subcommand. check's report goes to `write` (NULL: stdout); audit
 * prints to stdout and writes its --out folder. Returns the exit code: 0 pass, 1 a law or cell
 * failed, 2 bad usage, whose one-line reason goes to `error` (error_size bytes), 3 (check) no law
 * failed and one is inconclusive. */
int flashcheck_run(const fc_kernel *kernel, const char *const *worker_argv, const char *replay_prefix, int argc,
                   const char *const *argv, flashcheck_write_fn write, void *ctx, char *error, size_t error_size);

/* The worker's loop, in a process started by flashcheck_run with a worker command: serves `kernel`
 * on the inherited descriptors until the suite closes them; with kernel == NULL, reports `load_error`
 * (why the worker has no kernel: the suite's one-line exit-2 message) and returns. Returns the
 * process's exit code. */
int flashcheck_serve(const fc_kernel *kernel, const char *load_error);

/* Copies src into dst (host or CUDA memory, any strides) after checking that their shapes, dtypes
 * and device types agree. 0 on success; otherwise nonzero with a one-line reason in `error`. */
int flashcheck_copy(const DLTensor *src, const DLTensor *dst, char *error, size_t error_size);

/* 1 while a kernel's supports() runs for flashcheck's start-up probe (which dtypes, masks, head dims and
 * variants the kernel takes at all, asked on made-up problems), 0 while it gates a case (every case is
 * asked again before it runs). A supports() that is costly to answer (one that compiles the problem)
 * may answer the probe from its declarations alone. */
int flashcheck_probing(void);

/* "flashcheck 0.1.0 (plugin ABI 2)". */
const char *flashcheck_version(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHCHECK_FLASHCHECK_H_ */
