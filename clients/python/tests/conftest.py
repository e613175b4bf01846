import os
import sys

# lf_testlib sits beside the tests (the package itself is the installed one)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
