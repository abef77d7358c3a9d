"""Reference scavenging: looking through the process (``gc``, raw memory, files) for the reference's output.

References are computed in a separate process, so a candidate that searches its heap for the right
answer finds nothing; this gate checks that the reference did run elsewhere and refuses the search
itself, seen at run time (audit events from candidate frames) or in the source.
"""

from __future__ import annotations

from harness.measure.evidence import Evidence
from harness.verdict.gates._base import gate
from harness.verdict.gates._source import matching, scan_source
from protocol import Protocol

NAME = "reference_scavenging"

HEAP_REFS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "gc.garbage", "ctypes.string_at",
    "ctypes.cast", "ctypes.memmove", "ctypes.pythonapi", "torch.load", "numpy.load", "pickle.load",
    "pickle.loads", "glob.glob", "glob.iglob", "os.listdir", "os.scandir", "os.walk", "torch.UntypedStorage.from_file",
})
HEAP_SUFFIXES = (".from_address", ".rglob", ".iterdir")
HEAP_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents", "ctypes.string_at",
                         "ctypes.cdata", "os.listdir", "os.scandir", "glob.glob"})


@gate(NAME)
def scavenging_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    problems: list[str] = []
    cpid, rpid = evidence.candidate_pid, evidence.reference_pid
    if cpid <= 0 or rpid <= 0:
        problems.append("the candidate or reference process id was not recorded, so separate processes "
                        "cannot be confirmed")
    elif cpid == rpid:
        problems.append(f"the reference was computed in the candidate's process (pid {cpid}): its output "
                        "could be found there")
    events = sorted(set(evidence.candidate_integrity.audit_events) & HEAP_EVENTS)
    if events:
        problems.append(f"candidate code raised audit events {events}: it searched the process or the disk")
    scan = scan_source(evidence.candidate_source)
    if scan.parse_error:
        problems.append(f"the candidate source does not parse ({scan.parse_error}); it cannot be scanned")
    found = matching(scan.references, exact=HEAP_REFS, suffixes=HEAP_SUFFIXES)
    if found:
        problems.append(f"the candidate searches the heap, raw memory or the file system "
                        f"({scan.where(found)}), as code scavenging the reference's output does")
    procs = [r for r in scan.strings if "/proc/" in r.name or "/dev/shm" in r.name]
    if procs:
        problems.append(f"the candidate names process or shared-memory paths ({scan.where(procs)})")
    return problems, f"reference computed in pid {rpid}, candidate in pid {cpid}; no heap or file search"
