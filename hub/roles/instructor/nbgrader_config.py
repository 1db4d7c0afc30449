"""nbgrader for the instructor on the course's hub (hub/README.md): the course folder in the home.

The hub's spawner puts this folder on JUPYTER_CONFIG_PATH (a root-owned copy under the hub's
venv) and TC_COURSE_ID, TC_EXCHANGE in the server's environment; hub/hubctl.py writes the same
settings into ~/course/nbgrader_config.py for the command line.
"""

import os

c = get_config()  # noqa: F821  (provided by traitlets)

COURSE = os.path.join(os.path.expanduser("~"), "course")
c.CourseDirectory.root = COURSE
c.CourseDirectory.course_id = os.environ["TC_COURSE_ID"]
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(COURSE, "gradebook.db")
c.Exchange.root = os.environ["TC_EXCHANGE"]
# Collect refuses a submission not owned by the student it names, takes the submission time from
# the file system (not from what the student wrote), makes the notebooks inert (hub/tc_hub/exchange.py).
c.ExchangeFactory.collect = "tc_hub.exchange.CourseExchangeCollect"
# nbgrader's kernels (Validate, generate_solution, a command-line autograde) on IPC sockets in the
# instructor's own runtime folder (hub/tc_hub/kernels.py).
c.KernelManager.transport = "ipc"
c.NotebookClient.kernel_manager_class = "tc_hub.kernels.RuntimeDirKernelManager"
