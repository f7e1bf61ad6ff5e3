/* flashcheck's C API (libflashcheck.so): the property suite for a program that embeds it, such as the
 * Python bridge (python/flashcheck, pure ctypes over these functions). A kernel is an fc_kernel of
 * <flashcheck/plugin.h>, built by the caller (callbacks in the caller's language) or served by a
 * worker process the suite starts. A request is a typed struct (flashcheck_check_request,
 * flashcheck_audit_request), its result a flashcheck_result with the laws' verdicts and the JSON
 * report in memory: the same requests the CLI's `check` and `audit` parse their flags into. No
 * exception or abort crosses this boundary: bad input is exit 2 with one line. */
#ifndef FLASHCHECK_FLASHCHECK_H_
#define FLASHCHECK_FLASHCHECK_H_

#include <flashcheck/plugin.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Receives the report's text as it is produced (the caller prints or keeps it). */
typedef void (*flashcheck_write_fn)(const char* text, size_t size, void* ctx);

/* Every struct below starts with `struct_size`, set by the caller to sizeof the struct it was built
 * with: a struct grows by fields added at its end, and a library takes the sizes of every version it
 * knows (this is version 1; any other size is exit 2). */

/* The kernel a request runs: either `kernel` (run in this process; its callbacks are called from the
 * suite's threads, one call at a time) or, with kernel == NULL, the kernel served by the worker
 * command `worker_argv` (NULL-terminated, argv[0] a path; the command calls flashcheck_serve),
 * restarted after each fault. `worker_env` (NULL-terminated "KEY=VALUE" strings, or NULL) is added to
 * the worker's environment alone (a KEY there replaces this process's value); this process's own
 * environment is never changed. Replay lines start with `replay_prefix`, in which "{cmd}" stands for
 * the subcommand. The report goes to `write` (NULL: stdout). */
typedef struct flashcheck_subject {
  size_t struct_size; /* sizeof(flashcheck_subject) */
  const fc_kernel* kernel;
  const char* const* worker_argv;
  const char* const* worker_env;
  const char* replay_prefix;
  flashcheck_write_fn write;
  void* write_ctx;
} flashcheck_subject;

typedef enum flashcheck_oracle { /* the certified oracle (`--oracle`) */
                                 FLASHCHECK_ORACLE_AUTO =
                                     0, /* the GPU where a CUDA device is present and the problem is covered */
                                 FLASHCHECK_ORACLE_CPU = 1,
                                 FLASHCHECK_ORACLE_GPU = 2 /* an error where the GPU oracle cannot run */
} flashcheck_oracle;

typedef enum flashcheck_layout {                              /* the tensors' layouts (`--layout`) */
                                 FLASHCHECK_LAYOUT_MIXED = 0, /* compact and strided */
                                 FLASHCHECK_LAYOUT_COMPACT = 1
} flashcheck_layout;

typedef enum flashcheck_on_inconclusive { /* check's exit code when no law failed and one is inconclusive */
                                          FLASHCHECK_INCONCLUSIVE_EXIT3 = 0, /* 3 */
                                          FLASHCHECK_INCONCLUSIVE_FAIL = 1,  /* 1 (`--fail-on-inconclusive`) */
                                          FLASHCHECK_INCONCLUSIVE_PASS = 2   /* 0 (`--allow-inconclusive`) */
} flashcheck_on_inconclusive;

/* `flashcheck check` (docs/laws.md): every law, or one, on the subject. A field left 0 or NULL takes
 * the CLI's default; each is the CLI option named beside it, checked as the CLI checks it. */
typedef struct flashcheck_check_request {
  size_t struct_size; /* sizeof(flashcheck_check_request) */
  flashcheck_subject subject;
  int32_t cases;                       /* --cases: random cases per law, 1 to 1000000 (0: 100) */
  int32_t seed_given;                  /* 1: `seed` is the RapidCheck seed; 0: a random one, printed */
  uint64_t seed;                       /* --seed */
  const char* law;                     /* --law: one law's id (NULL: every law) */
  const char* reproduce;               /* --reproduce: a replay token (needs law) */
  const char* case_file;               /* --case: one regression file (needs law) */
  const char* inputs;                  /* --inputs: every law that applies to this safetensors file */
  const char* regressions;             /* --regressions: the regression folder (NULL: the source tree's) */
  int32_t save_regressions;            /* --save-regressions */
  double timeout_s;                    /* --timeout: seconds one call may take, 0.001 to 1e6 (0: 60) */
  int32_t layout;                      /* flashcheck_layout */
  int32_t max_n, max_batch, max_heads; /* --max-n, --max-batch, --max-heads (0: no bound) */
  int32_t shape_buckets;               /* --shape-buckets */
  int32_t oracle;                      /* flashcheck_oracle */
  int32_t on_inconclusive;             /* flashcheck_on_inconclusive */
  int32_t shrink_faults;               /* --shrink-faults: 1 to 1000000 (0: 8) */
  int32_t replay_repeats;              /* --replay-repeats: 1 to 100000 (0: 10; -1: none) */
  int32_t no_progress;                 /* --no-progress: no progress lines on stderr */
  const char* json_out;                /* --json-out: also write the result's JSON to this file (NULL: none) */
} flashcheck_check_request;

/* `flashcheck audit` (docs/audit.md) with the subject as one more kernel beside `kernels`. Lists are
 * NULL-terminated (NULL: none). */
typedef struct flashcheck_audit_request {
  size_t struct_size; /* sizeof(flashcheck_audit_request) */
  flashcheck_subject subject;
  const char* out;            /* --out: the report's folder (NULL: reports/out) */
  int32_t quick;              /* --quick: the small sweep */
  int32_t accumulation;       /* --accumulation: the accumulation audit */
  const char* const* kernels; /* --kernel: registry kernels audited beside the subject */
  const char* const* dtypes;  /* --dtype: F16, BF16, F32 (NULL: all three) */
  const char* const* regimes; /* --regime */
  const char* const* cases;   /* --case: case ids */
  int32_t seed_given;         /* 1: `seed` seeds the inputs; 0: 1 */
  uint64_t seed;              /* --seed */
  double timeout_s;           /* --timeout (0: 60) */
  int32_t layout;             /* flashcheck_layout */
  int32_t jobs;               /* --jobs: cases in flight, 1 to 1024 (0: the hardware threads) */
  int32_t oracle;             /* flashcheck_oracle */
  const char* junit;          /* --junit: also write JUnit XML here (NULL: none) */
  const char* shard;          /* --shard: "i/n" (NULL: the whole sweep) */
  int32_t print_json;         /* --json: report.json's text to `write` instead of the summary */
} flashcheck_audit_request;

typedef enum flashcheck_law_status {
  FLASHCHECK_LAW_PASS = 0,
  FLASHCHECK_LAW_FAIL = 1,
  FLASHCHECK_LAW_INCONCLUSIVE = 2,  /* too few accepted cases, or a replay that did not reproduce */
  FLASHCHECK_LAW_NOT_APPLICABLE = 3 /* the law cannot judge this kernel (`message` says why) */
} flashcheck_law_status;

/* One law's verdict (check). Entries are `law_size` bytes apart: flashcheck_result_law finds one. */
typedef struct flashcheck_law_result {
  size_t struct_size;       /* sizeof(flashcheck_law_result) of the library */
  const char* id;           /* the law's id (`check --list-laws`) */
  int32_t status;           /* flashcheck_law_status */
  int64_t cases;            /* random cases run */
  int64_t regression_cases; /* regression files replayed */
  int64_t declined;         /* cases the kernel declined (its supports() or declarations) */
  const char* message;      /* the failure, the inconclusive reason or why n/a ("" when it holds) */
} flashcheck_law_result;

/* What a request gave. The caller sets struct_size; the library fills the rest and owns every
 * pointer in it until flashcheck_result_free. */
typedef struct flashcheck_result {
  size_t struct_size; /* sizeof(flashcheck_result) */
  int32_t exit_code;  /* 0 pass, 1 a law or cell failed, 2 bad usage, 3 (check) no law failed and one is
                         inconclusive (flashcheck_on_inconclusive) */
  const char* error;  /* exit 2: the one-line reason; otherwise "" */
  const char* json;   /* check: every law's result (the `--json-out` document, docs/laws.md); audit:
                         report.json; "" when there is none (exit 2, check --inputs) */
  size_t json_size;
  const flashcheck_law_result* laws; /* check: one per law run, in the order they ran */
  size_t num_laws;
  size_t law_size; /* bytes from one entry to the next */
  void* internal;  /* the library's */
} flashcheck_result;

/* Run a request. Returns the exit code (also result->exit_code). A NULL or malformed request (a
 * wrong struct_size, a NULL where a value is needed, an unknown law id, enum value or name) is exit
 * 2 with its one-line reason in result->error; a NULL result, or one whose struct_size is not
 * sizeof(flashcheck_result), is exit 2 with nothing written. */
int flashcheck_check(const flashcheck_check_request* request, flashcheck_result* result);
int flashcheck_audit(const flashcheck_audit_request* request, flashcheck_result* result);
/* Frees what a result holds (NULL, or a result freed before: nothing) and zeroes its pointers. */
void flashcheck_result_free(flashcheck_result* result);

/* The i-th law entry of a result (i < num_laws). */
static inline const flashcheck_law_result* flashcheck_result_law(const flashcheck_result* r, size_t i) {
  return (const flashcheck_law_result*)((const char*)r->laws + i * r->law_size);
}

/* The CLI's `check` or `audit` on the subject, from its command line: argv[0] is "check" or "audit",
 * the rest that command's options as the CLI takes them (argc in all), parsed into the same requests
 * flashcheck_check and flashcheck_audit run (this is `python -m flashcheck`'s front end). Returns
 * the exit code; exit 2's one-line reason goes to `error` (error_size bytes). */
int flashcheck_run(const flashcheck_subject* subject, int argc, const char* const* argv, char* error,
                   size_t error_size);

/* The worker's loop, in a process the suite started with a subject's worker command: serves `kernel`
 * on the inherited descriptors until the suite closes them; with kernel == NULL, reports `load_error`
 * (why the worker has no kernel: the suite's one-line exit-2 message) and returns. Returns the
 * process's exit code. */
int flashcheck_serve(const fc_kernel* kernel, const char* load_error);

/* Copies src into dst (host or CUDA memory, any strides) after checking that their shapes, dtypes
 * and device types agree. 0 on success; otherwise nonzero with a one-line reason in `error`. */
int flashcheck_copy(const DLTensor* src, const DLTensor* dst, char* error, size_t error_size);

/* 1 while a kernel's supports() runs for flashcheck's start-up probe (which dtypes, masks, head dims and
 * variants the kernel takes at all, asked on made-up problems), 0 while it gates a case (every case is
 * asked again before it runs). A supports() that is costly to answer (one that compiles the problem)
 * may answer the probe from its declarations alone. */
int flashcheck_probing(void);

/* "flashcheck 0.1.0 (plugin ABI 2)". */
const char* flashcheck_version(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHCHECK_FLASHCHECK_H_ */
