"""ctest readme_blocks: every fenced block of README.md is run or checked by a test.

    readme_blocks.py SOURCE_DIR BUILD_DIR

- ```python blocks: run verbatim by tests/py/test_readme.py (pytest at 1, 2, 4 ranks); here only
  their count is checked against that file's expectation.
- ```cpp blocks: the first is compiled and run verbatim by test_readme_example; every other one
  must be a verbatim excerpt (between `// [readme-...]` markers) of a program in examples/ that
  ctest runs (example_*).
- ```cmake blocks: verbatim lines of tests/package/consumer/CMakeLists.txt, which ctest
  cpp_package configures, builds and runs against the installed package.
- ```sh blocks: run here with bash -euo pipefail from a scratch directory holding `build` (a link
  to BUILD_DIR), `examples` and `tests` (links into the source) and PREFIX set to a scratch
  prefix (DESTDIR too for the block installing the Python component), in README order — except the commands listed in EXEMPT, each with the test that covers
  it. `sudo apt-get install -y PKGS` lines are checked instead: every package is installed here.
  `/usr/bin/python3` in a block (the README's Debian default) runs as the interpreter this test
  runs under, the one the build was configured with (Python3_EXECUTABLE).
Exit code 0 when all hold; the first failure is printed with its block.
"""
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

# Commands not run here, and why. Matched against a whole (stripped) line.
EXEMPT = {
    r"scripts/run_main\.sh\b.*": "the main job itself (about 15 minutes; run by hand, its summary is in docs/lm.md)",
    r"scripts/run_tests\.sh\b.*": "the whole test suite, of which this test is a part",
    r"cmake -S \. -B build .*": "how the tree under test was configured (scripts/build.sh runs it)",
    r"cmake --build build": "how the tree under test was built (scripts/build.sh runs it)",
    r"build/apps/kjv_prepare .*": "a step of the main job (scripts/run_main.sh)",
    r"mpirun -n 2 build/tools/burst-lm .*": "a step of the main job (scripts/run_main.sh)",
    r"--context all .*": "continuation of the generate command above",
    r"--save-kv .*": "continuation of the eval command above",
}


def blocks(text):
    return re.findall(r"^```(\w+)\n(.*?)^```$", text, re.S | re.M)


def dedent_lines(text):
    return [line.strip() for line in text.strip().splitlines()]


def check_cpp(body, index, src):
    if index == 0:
        return None      # test_readme_example compiles this one (tests/CMakeLists.txt extracts it)
    want = dedent_lines(body)
    for f in sorted((src / "examples").glob("*.cc")):
        text = f.read_text()
        for part in re.findall(r"// \[readme-[\w-]+\]\n(.*?)// \[/readme-", text, re.S):
            if dedent_lines(part) == want:
                return None
    return "not a verbatim `// [readme-...]` excerpt of any examples/*.cc"


def check_cmake(body, src):
    have = dedent_lines((src / "tests/package/consumer/CMakeLists.txt").read_text())
    missing = [line for line in dedent_lines(body) if line and line not in have]
    return f"lines not in tests/package/consumer/CMakeLists.txt: {missing}" if missing else None


def run_sh(body, scratch, env):
    lines, script = [], []
    for raw in body.splitlines():
        line = raw.split("  #")[0].strip() if "  #" in raw else raw.strip()
        if not line:
            continue
        if any(re.fullmatch(p, line.rstrip("\\").strip()) for p in EXEMPT):
            continue
        m = re.fullmatch(r"sudo apt-get install -y (.*)", line)
        if m:
            for pkg in m.group(1).split():
                q = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True,
                                   text=True)
                if "install ok installed" not in q.stdout:
                    return f"package {pkg} (README's apt-get line) is not installed here"
            continue
        script.append(raw.replace("/usr/bin/python3", shlex.quote(sys.executable)))
        lines.append(line)
    if not script:
        return None
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(script)], cwd=scratch, env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    print(f"ran: {lines}\n{r.stdout[-600:]}", flush=True)
    return None


def main():
    src, build = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    text = (src / "README.md").read_text()
    found = blocks(text)
    failures = []
    with tempfile.TemporaryDirectory(prefix="burst-readme-") as tmp:
        scratch = pathlib.Path(tmp)
        (scratch / "build").symlink_to(build)
        for d in ("examples", "tests", "scripts"):
            (scratch / d).symlink_to(src / d)
        env = dict(os.environ, PREFIX=str(scratch / "prefix"), OMP_NUM_THREADS="1",
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        env.pop("DESTDIR", None)
        counts = {"cpp": 0}
        for lang, body in found:
            if lang == "python":
                err = None       # tests/py/test_readme.py
            elif lang == "cpp":
                err = check_cpp(body, counts["cpp"], src)
                counts["cpp"] += 1
            elif lang == "cmake":
                err = check_cmake(body, src)
            elif lang == "sh":
                # `cmake --install --component python` writes into the interpreter's
                # site-packages: here it goes under a scratch DESTDIR instead
                block_env = (dict(env, DESTDIR=str(scratch / "destdir"))
                             if "--component python" in body else env)
                err = run_sh(body, scratch, block_env)
            else:
                err = f"no test knows how to run a ```{lang} block"
            if err:
                failures.append(f"README.md ```{lang} block:\n{body}\n-> {err}")
    n_py = sum(1 for lang, _ in found if lang == "python")
    test_readme = (src / "tests/py/test_readme.py").read_text()
    if f"len(_blocks()) == {n_py}" not in test_readme:
        failures.append(f"README.md has {n_py} python blocks; tests/py/test_readme.py expects another count")
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(found)} README blocks, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
