"""app.py gives every thread one OpenMP thread, not only the thread of the first run.

Each Streamlit run and each background comparison has its own thread; ``omp_set_num_threads`` (what
threadpoolctl calls) binds only its caller, and two spinning OpenMP threads per k-means fit on a busy
2-core machine made the K-means page 10-25 times slower. Runs in a fresh interpreter, where nothing has
loaded OpenMP before app.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

PROBE = """
import json, threading
from streamlit.testing.v1 import AppTest
from threadpoolctl import threadpool_info

AppTest.from_file("app.py", default_timeout=120).run()
import sklearn.cluster  # what the K-means page loads later (if app.py's warm-up has not yet)


seen = []
worker = threading.Thread(target=lambda: seen.extend(threadpool_info()))
worker.start()
worker.join()
print(json.dumps([(i["user_api"], i["num_threads"]) for i in seen]))
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: OpenMP uses one thread anyway")
def test_a_new_thread_after_the_first_run_gets_one_openmp_thread(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    env["DPCORE_DATA_DIR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    pools = json.loads(out.stdout.strip().splitlines()[-1])
    assert ["openmp", 1] in pools, pools  # scikit-learn's OpenMP runtime is loaded, with one thread
    assert all(n == 1 for api, n in pools if api == "openmp"), pools
