"""The CI recipes of examples/ci run as local processes, each required to give the report the unsharded
run writes, byte for byte (report.json and report.md):
  - github-actions.yml: the `audit shard` step of every matrix entry (the matrix and the workflow's env
    as written, AUDIT_ARGS replaced by a small sweep), then the `merge and gate` step on the shards
    laid out as download-artifact lays them, against a baseline committed from the unsharded run;
  - gpus/: the ctest resource-group project configured against flashcheck's build tree
    (find_package(flashcheck)), run with gpus/resources.json;
  - slurm/: audit.sbatch as every array task would run it (concurrently), then merge.sbatch.
    recipes_test.py FLASHCHECK_CLI BUILD_DIR"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# The small sweep every recipe shards: 8 cases of cpu_tiled, a few seconds in all.
AUDIT_ARGS = "--quick --kernel cpu_tiled --dtype F16,BF16 --regime normal,causal_top_left --seed 1"


def fail(msg):
    sys.stderr.write("recipes_test: %s\n" % msg)
    sys.exit(1)


def sh(cmd, env=None, cwd=None, expect=0):
    r = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    if r.returncode != expect:
        fail("%s: exit %d (expected %d)\n%s%s" % (" ".join(cmd), r.returncode, expect, r.stdout[-3000:],
                                                   r.stderr[-3000:]))
    return r


def tail(tmp, name):
    with open(os.path.join(tmp, name)) as f:
        return f.read()[-3000:]


def same_report(got_dir, want_dir, what):
    for name in ("report.json", "report.md"):
        with open(os.path.join(got_dir, name), "rb") as g, open(os.path.join(want_dir, name), "rb") as w:
            if g.read() != w.read():
                fail("%s: %s differs from the unsharded run's" % (what, name))
    print("%s: report.json and report.md equal the unsharded run's" % what)


def github(fc, tmp, want):
    try:
        import yaml
    except ImportError:
        fail("PyYAML is needed to read github-actions.yml (Debian: python3-yaml; scripts/setup.sh test installs it)")
    with open(os.path.join(HERE, "github-actions.yml")) as f:
        wf = yaml.safe_load(f)
    env = dict(os.environ)
    env.update({k: str(v) for k, v in wf["env"].items()})
    shards = wf["jobs"]["audit"]["strategy"]["matrix"]["shard"]
    if shards != list(range(int(env["SHARDS"]))):
        fail("github-actions.yml: the matrix %s is not 0..SHARDS-1 (SHARDS=%s)" % (shards, env["SHARDS"]))
    env["AUDIT_ARGS"] = AUDIT_ARGS
    bindir = os.path.join(tmp, "bin")  # `flashcheck` on PATH, as the install step leaves it
    os.makedirs(bindir)
    os.symlink(fc, os.path.join(bindir, "flashcheck"))
    env["PATH"] = bindir + os.pathsep + env["PATH"]

    def step(job, name):
        for s in wf["jobs"][job]["steps"]:
            if s.get("name") == name:
                return s["run"]
        fail("github-actions.yml: no step %r in job %s" % (name, job))

    audit = step("audit", "audit shard")
    procs = []
    for i in shards:
        script = audit.replace("${{ matrix.shard }}", str(i))
        if "${{" in script:
            fail("github-actions.yml: an expression this test does not know in %r" % script)
        work = os.path.join(tmp, "gh", "runner%d" % i)
        os.makedirs(work)
        log = open(os.path.join(tmp, "gh-shard%d.log" % i), "w")
        procs.append((i, work, subprocess.Popen(["bash", "-e", "-c", script], cwd=work, env=env, stdout=log,
                                                stderr=subprocess.STDOUT)))
    repo = os.path.join(tmp, "gh", "report")
    for i, work, p in procs:
        if p.wait() != 0:
            fail("github-actions.yml: shard %d exit %d\n%s" % (i, p.returncode, tail(tmp, "gh-shard%d.log" % i)))
        # download-artifact with a pattern: shards/<artifact name>/report.json
        dst = os.path.join(repo, "shards", "flashcheck-shard-%d" % i)
        os.makedirs(dst)
        shutil.copy(os.path.join(work, "shard", "report.json"), dst)
    os.makedirs(os.path.join(repo, os.path.dirname(env["BASELINE"])))
    shutil.copy(os.path.join(want, "report.json"), os.path.join(repo, env["BASELINE"]))
    env["GITHUB_STEP_SUMMARY"] = os.path.join(tmp, "gh", "summary.md")
    sh(["bash", "-e", "-c", step("report", "merge and gate")], env=env, cwd=repo)
    out = os.path.join(repo, "flashcheck-report")
    same_report(out, want, "github-actions.yml (%d shards)" % len(shards))
    for name in ("junit.xml", "report.html", "gate.md"):
        if not os.path.isfile(os.path.join(out, name)):
            fail("github-actions.yml: the report artefact lacks %s" % name)
    with open(env["GITHUB_STEP_SUMMARY"]) as f, open(os.path.join(out, "gate.md")) as g:
        if f.read() != g.read() or os.path.getsize(env["GITHUB_STEP_SUMMARY"]) == 0:
            fail("github-actions.yml: the step summary is not gate.md")


def gpus(build, tmp, want):
    shards = 4
    b = os.path.join(tmp, "gpus")
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    sh(["cmake", "-S", os.path.join(HERE, "gpus"), "-B", b] + gen +
       ["-Dflashcheck_DIR=" + build, "-DSHARDS=%d" % shards, "-DAUDIT_ARGS=" + AUDIT_ARGS])
    r = sh(["ctest", "--test-dir", b, "--resource-spec-file", os.path.join(HERE, "gpus", "resources.json"),
            "-j", str(shards), "--output-on-failure", "-V"])
    got = sorted(set(re.findall(r"shard \d+/%d on GPU (\d+)" % shards, r.stdout)))
    if len(got) != shards:
        fail("gpus: the %d shards did not run on %d distinct GPUs (%s)" % (shards, shards, got))
    same_report(os.path.join(b, "merged"), want, "gpus/ (ctest resource groups, %d shards on GPUs %s)"
                % (shards, ",".join(got)))


def slurm(fc, tmp, want):
    shards = 3
    out = os.path.join(tmp, "slurm")
    env = dict(os.environ, FLASHCHECK=fc, OUT=out, AUDIT_ARGS=AUDIT_ARGS, SHARDS=str(shards),
               BASELINE=os.path.join(want, "report.json"), SLURM_ARRAY_TASK_COUNT=str(shards))
    procs = [subprocess.Popen(["bash", os.path.join(HERE, "slurm", "audit.sbatch")],
                              env=dict(env, SLURM_ARRAY_TASK_ID=str(i)), cwd=tmp,
                              stdout=open(os.path.join(tmp, "slurm-%d.log" % i), "w"), stderr=subprocess.STDOUT)
             for i in range(shards)]
    for i, p in enumerate(procs):
        if p.wait() != 0:
            fail("slurm: array task %d exit %d\n%s" % (i, p.returncode, tail(tmp, "slurm-%d.log" % i)))
    sh(["bash", os.path.join(HERE, "slurm", "merge.sbatch")], env=env, cwd=tmp)
    same_report(os.path.join(out, "merged"), want, "slurm/ (%d array tasks)" % shards)


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: recipes_test.py FLASHCHECK_CLI BUILD_DIR\n")
        return 2
    fc, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="fc_recipes_")
    try:
        want = os.path.join(tmp, "unsharded")
        sh([fc, "audit"] + AUDIT_ARGS.split() + ["--out", want])
        github(fc, tmp, want)
        gpus(build, tmp, want)
        slurm(fc, tmp, want)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("recipes_test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
