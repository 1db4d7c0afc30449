"""The course hub's pieces that run inside users' Jupyter servers and nbgrader (hub/README.md).

hubctl.install_roles copies this package into the hub's venv (site-packages/tc_hub/), with
grader/trusted/inert.py as tc_hub/inert.py, root-owned:

* ``exchange``: nbgrader's collect, refusing what a student could forge (the instructor's
  role selects it: ``ExchangeFactory.collect``);
* ``formgrader``: Formgrader's markdown filter, showing a student's markup as text unless it
  is on inert.py's allowlist;
* ``kernels``: the kernel manager nbgrader's Validate uses, on IPC sockets in the user's
  runtime folder instead of TCP ports on 127.0.0.1.
"""
