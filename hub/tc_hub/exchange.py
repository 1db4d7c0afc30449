"""nbgrader's collect on the course hub: what a student could forge is refused (hub/README.md, "The exchange").

nbgrader's exchange is a shared folder: students write their submissions into ``inbound/``
(write and search for everyone, no listing) as ``<student>+<assignment>+<time>+<random>/``
with a ``timestamp.txt`` inside. Both the name and the time are the student's to write:
nbgrader's own collect warns when a folder's owner is not the student it names ("cheating
attempt?") and collects it anyway, and takes the time from the name and ``timestamp.txt``.

This collect (``ExchangeFactory.collect = "tc_hub.exchange.CourseExchangeCollect"``, set by the
instructor's role and ~/course/nbgrader_config.py) keeps nbgrader's behaviour for honest
submissions and changes three things:

* **who**: a submission is collected only if its folder and everything in it belong to the
  system user it names; otherwise it is *refused* (logged as an error, not copied). Symbolic
  links, hard links and special files are refused too (a link could pull in a file the student
  changes later, or one of the instructor's);
* **when**: the submission time is the newest *change time* (ctime) of the folder and every
  entry in it, read after the copy. A process cannot set a ctime (the kernel sets it to the
  present on every change of content, name, owner or mode; only root changing the clock could
  backdate it), so a student can make their submission later, never earlier. Whatever the name
  and ``timestamp.txt`` say is ignored; the collected ``timestamp.txt`` holds this time (the
  course grader's late rule and Formgrader read it). Changing a submitted file after the
  deadline therefore makes the submission late, as it should. (A restore from a backup that
  does not keep ctimes would make every submission as late as the restore: collect before.)
  Of several submissions of one student the newest by this time is collected;
* **what**: every collected notebook is made inert (grader/trusted/inert.py) before anyone
  opens it: Formgrader and JupyterLab then show markup a browser could run as text.

The students' submit (``ExchangeFactory.submit``, the student role) is nbgrader's, except that
the submission folder ends 0755, not 0777: nbgrader leaves it writable by everyone ("so the
instructor can delete later"; hidden only by its random name), so whoever learns the name could
delete or add files in a classmate's submission. The instructor never needs to delete it.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import pwd
import shutil
import stat
from collections import defaultdict

from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.utils import check_mode, ignore_patterns

try:
    from . import inert
except ImportError:                      # in the repository (tests): the grader's copy
    from grader.trusted import inert

TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format, in UTC


class CourseExchangeSubmit(ExchangeSubmit):
    """nbgrader's submit; the submission folder then 0755 (the student's alone to change)."""

    def copy_files(self):
        super().copy_files()
        os.chmod(os.path.join(self.inbound_path, self.assignment_filename), 0o755)


class Refused(Exception):
    """A submission that is not collected, and why."""


def examine(path: str, student: str) -> tuple[int, dt.datetime]:
    """(uid, time) of a submission folder that belongs entirely to ``student``; Refused otherwise.

    The time is the newest ctime of the folder and everything in it (naive UTC, as nbgrader's
    parse_utc gives), read with lstat: nothing is followed.
    """
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        raise Refused(f"it names {student!r}, who is not a user of this host") from None
    top = os.lstat(path)
    if not stat.S_ISDIR(top.st_mode):
        raise Refused("it is not a folder")

    def owner(st) -> str:
        try:
            return pwd.getpwuid(st.st_uid).pw_name
        except KeyError:
            return f"uid {st.st_uid}"

    if top.st_uid != uid:
        raise Refused(f"it claims to be submitted by {student} but is owned by {owner(top)}")
    newest, errors = top.st_ctime_ns, []
    for folder, dirs, files in os.walk(path, onerror=errors.append):
        for name in dirs + files:
            full = os.path.join(folder, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, path)
            if st.st_uid != uid:
                raise Refused(f"{rel} in it is owned by {owner(st)}, not {student}")
            if stat.S_ISLNK(st.st_mode):
                raise Refused(f"{rel} in it is a symbolic link")
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                raise Refused(f"{rel} in it is not a regular file")
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                raise Refused(f"{rel} in it has other hard links")
            newest = max(newest, st.st_ctime_ns)
    if errors:
        raise Refused(f"part of it is unreadable: {errors[0]}")
    when = dt.datetime.fromtimestamp(newest / 1e9, dt.timezone.utc).replace(tzinfo=None)
    return uid, when


class CourseExchangeCollect(ExchangeCollect):
    """nbgrader's ExchangeCollect with the owner checked, the time from the file system, notebooks made inert."""

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail("Course not found: {}".format(self.inbound_path))
        if not check_mode(self.inbound_path, read=True, execute=True):
            self.fail("You don't have read permissions for the directory: {}".format(self.inbound_path))
        student_id = self.coursedir.student_id if self.coursedir.student_id else "*"
        pattern = os.path.join(self.inbound_path, "{}+{}+*".format(student_id, self.coursedir.assignment_id))
        self.refused = []
        records = []
        for path in sorted(glob.glob(pattern)):
            filename = os.path.basename(path)
            parts = filename.rsplit("+", 3)
            if len(parts) < 3:
                self._refuse(filename, "its name is not <student>+<assignment>+<time>+<random>")
                continue
            try:
                _, when = examine(path, parts[0])
            except (Refused, OSError) as exc:
                self._refuse(filename, str(exc))
                continue
            records.append({"username": parts[0], "filename": filename, "timestamp": when})
        groups = defaultdict(list)
        for record in records:
            groups[record["username"]].append(record)
        self.duedate = None
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                pass
        self.src_records = []
        for group in groups.values():
            newest_first = self._sort_by_timestamp(group)
            if self.duedate is not None and self.before_duedate:
                on_time = [r for r in newest_first if r["timestamp"] <= self.duedate]
                newest_first = on_time or newest_first
            self.src_records.append(newest_first[0])

    def _refuse(self, filename: str, why: str) -> None:
        self.refused.append((filename, why))
        self.log.error("Refused submission %s: %s; not collected", filename, why)

    def do_copy(self, src, dest, log=None):
        """nbgrader's copy (its ignore patterns and size limits), copying links as links (never following them)."""
        size = self.get_size(src)
        if size > 1000 * self.coursedir.max_dir_size:
            raise RuntimeError(f"Directory size is too big. Size is {size}, maximum size is "
                               f"{1000 * self.coursedir.max_dir_size}")
        shutil.copytree(src, dest, symlinks=True,
                        ignore=ignore_patterns(exclude=self.coursedir.ignore, include=self.coursedir.include,
                                               max_file_size=self.coursedir.max_file_size, log=self.log))

    def copy_files(self):
        if not self.src_records:
            self.log.warning("No submissions of '{}' for course '{}' to collect".format(
                self.coursedir.assignment_id, self.coursedir.course_id))
        else:
            self.log.info("Processing {} submissions of '{}' for course '{}'".format(
                len(self.src_records), self.coursedir.assignment_id, self.coursedir.course_id))
        for rec in self.src_records:
            student_id = rec["username"]
            src_path = os.path.join(self.inbound_path, rec["filename"])
            dest_path = self.coursedir.format_path(self.coursedir.submitted_directory, student_id,
                                                   self.coursedir.assignment_id)
            os.makedirs(os.path.dirname(dest_path), exist_ok=True)
            updating = os.path.isdir(dest_path)
            if updating:
                existing = self.coursedir.get_existing_timestamp(dest_path)
                newer = existing is None or rec["timestamp"] > existing
                if not ((self.update and newer) or (self.before_duedate and existing != rec["timestamp"])):
                    self.log.info("{}: {} {}".format(
                        "No newer submission to collect" if self.update
                        else "Submission already exists, use --update to update", student_id,
                        self.coursedir.assignment_id))
                    continue
            staging = dest_path + ".collecting"
            shutil.rmtree(staging, ignore_errors=True)
            try:
                self.do_copy(src_path, staging)
                for folder, dirs, files in os.walk(staging):      # what was copied, checked again
                    for name in dirs + files:
                        mode = os.lstat(os.path.join(folder, name)).st_mode
                        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                            raise Refused(f"{name} changed into a link or special file while it was copied")
                _, when = examine(src_path, student_id)           # after the copy: no change it holds is newer
            except (Refused, OSError, RuntimeError, shutil.Error) as exc:
                shutil.rmtree(staging, ignore_errors=True)
                self._refuse(rec["filename"], str(exc))
                continue
            with open(os.path.join(staging, "timestamp.txt"), "w", encoding="utf-8") as f:
                f.write(when.replace(tzinfo=dt.timezone.utc).strftime(TIME_FORMAT))
            for folder, _, files in os.walk(staging):
                for name in files:
                    if name.endswith(".ipynb"):
                        changes = inert.inert_file(os.path.join(folder, name))
                        if changes:
                            self.log.warning("%s's %s: %d things a browser could run made inert (%s)", student_id,
                                             name, len(changes), "; ".join(changes[:3]))
            if updating:
                self.log.info("Updating submission: {} {}".format(student_id, self.coursedir.assignment_id))
                shutil.rmtree(dest_path)
            else:
                self.log.info("Collecting submission: {} {}".format(student_id, self.coursedir.assignment_id))
            os.rename(staging, dest_path)
            self.log.info("%s %s: submitted at %s UTC (the file system's change time)", student_id,
                          self.coursedir.assignment_id, when.isoformat(sep=" ", timespec="seconds"))
