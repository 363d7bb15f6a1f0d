#!/usr/bin/env python3
"""tests/quality/paired_diff_test.py: bench/quality/paired_diff.py on a hand-made report CSV, exact output."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "quality", "paired_diff.py")

CSV = """policy,ratio,k,w,seed,window,nll,kl,top1
full,1,8,0,0,0,2.0,0,1
full,1,8,0,0,1,3.0,0,1
full,1,8,0,0,2,4.0,0,1
h2o,0.5,4,1,0,0,2.5,0.1,0.9
h2o,0.5,4,1,0,1,3.5,0.1,0.9
h2o,0.5,4,1,0,2,4.0,0.1,0.9
keyformer,0.5,4,1,1,0,2.4,0.1,0.9
keyformer,0.5,4,1,2,0,2.2,0.1,0.9
keyformer,0.5,4,1,1,1,3.7,0.1,0.9
keyformer,0.5,4,1,2,1,3.7,0.1,0.9
keyformer,0.5,4,1,1,2,4.0,0.1,0.9
keyformer,0.5,4,1,2,2,4.0,0.1,0.9
"""

# keyformer per window (mean over its two seeds): 2.3, 3.7, 4.0; minus h2o: -0.2, +0.2, 0.0.
# mean 0; sample variance (0.04 + 0.04 + 0) / 2 = 0.04; se = sqrt(0.04 / 3) = 0.115; lower in 1 of 3.
EXPECTED = """NLL of `keyformer` minus each row's, paired per window (nats/token; negative: `keyformer` is better), \
± standard error over windows, and the windows where it is lower.

| row | r = 0.5 |
|---|---|
| h2o | +0.000 ± 0.115 (1/3) |
"""


class PairedDiff(unittest.TestCase):
    def run_script(self, *args):
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(CSV)
        try:
            return subprocess.run([sys.executable, SCRIPT, f.name, *args], capture_output=True, text=True)
        finally:
            os.unlink(f.name)

    def test_exact_table_with_seeds_averaged_per_window(self):
        r = self.run_script()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, EXPECTED)

    def test_an_unknown_row_is_named(self):
        r = self.run_script("tova")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("has no row 'tova' (rows: h2o, keyformer)", r.stderr)


if __name__ == "__main__":
    unittest.main()
