"""nbgrader for a student on the course's hub (hub/README.md): which course, where its exchange is.

The hub's spawner puts this folder on JUPYTER_CONFIG_PATH (a root-owned copy under the hub's
venv) and TC_COURSE_ID, TC_EXCHANGE in the server's environment.
"""

import os

c = get_config()  # noqa: F821  (provided by traitlets)

c.CourseDirectory.course_id = os.environ["TC_COURSE_ID"]
c.Exchange.root = os.environ["TC_EXCHANGE"]
# Validate's kernel on IPC sockets in the student's own runtime folder, not TCP ports any user on
# the host can reach (hub/tc_hub/kernels.py); jupyter_config.json says the same to every Jupyter app.
c.KernelManager.transport = "ipc"
c.NotebookClient.kernel_manager_class = "tc_hub.kernels.RuntimeDirKernelManager"
# nbgrader's submit leaves the submission folder in inbound/ writable by everyone: this one ends it 0755.
c.ExchangeFactory.submit = "tc_hub.exchange.CourseExchangeSubmit"
