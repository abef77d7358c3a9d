"""The fingerprint of the node (and device slot) a campaign attempt ran on.

Why: a verdict's ratio is only meaningful within one device of one node. The device fingerprint is
already stored per measurement session; this records, per attempt, which machine and which device
slot (Ray's accelerator ids, ``CUDA_VISIBLE_DEVICES``) the session's measuring children ran on, so a
resumed campaign's attempts can be told apart and checked.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.records import canonical_json, sha256_text


class NodeFingerprint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    hostname: str
    ray_node_id: str
    node_ip: str
    machine: str
    cpu_model: str
    cpu_count: int
    accelerator_ids: dict[str, list[str]]
    cuda_visible_devices: str | None

    @property
    def sha256(self) -> str:
        """Digest of what identifies the node (host and hardware), not the slot within it."""
        return sha256_text(canonical_json({"hostname": self.hostname, "ray_node_id": self.ray_node_id,
                                           "machine": self.machine, "cpu_model": self.cpu_model,
                                           "cpu_count": self.cpu_count}))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def node_fingerprint() -> NodeFingerprint:
    """This process's node, as Ray sees it (outside Ray: the host alone)."""
    node_id, ip, accel = "", "", {}
    try:
        import ray

        if ray.is_initialized():
            ctx: Any = ray.get_runtime_context()
            node_id = str(ctx.get_node_id())
            ip = str(ray.util.get_node_ip_address())
            accel = {k: [str(x) for x in v] for k, v in ctx.get_accelerator_ids().items() if v}
    except ImportError:
        pass
    return NodeFingerprint(hostname=socket.gethostname(), ray_node_id=node_id, node_ip=ip,
                           machine=platform.machine(), cpu_model=_cpu_model(), cpu_count=os.cpu_count() or 0,
                           accelerator_ids=accel, cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))


__all__ = ["NodeFingerprint", "node_fingerprint"]
