"""torchrun --nproc_per_node=N --no_python BINARY ARGS, through torchrun's
own elastic agent (torch.distributed.launcher.api, what torchrun calls):
Debian's torch 1.13 CLI cannot parse its --redirects default on Python
3.11, the agent itself works.

  torchrun_launch.py c10d|static NPROC BINARY [ARGS...]

c10d: the --standalone rendezvous (MASTER_PORT is a free port);
static: --master_addr/--master_port, whose store holds MASTER_PORT
(TORCHELASTIC_USE_AGENT_STORE=True) and whose workers meet on
MASTER_PORT + 1: both are chosen free, below the ephemeral range (a port
from bind(0) was seen taken by another test's connection before rank 0
bound it). PYTHONPATH must hold python/ (zeroshard._ports). Exit status:
0 when every worker exited 0.
"""
import sys
import uuid

from torch.distributed.launcher.api import LaunchConfig, elastic_launch
from zeroshard._ports import quiet_port


def main():
    backend, nproc, binary, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    if backend == "static":
        rdzv = dict(rdzv_backend="static",
                    rdzv_endpoint=f"127.0.0.1:{quiet_port(count=2)}",
                    rdzv_configs={"rank": 0})
    else:
        rdzv = dict(rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0")
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=nproc,
                          run_id=str(uuid.uuid4()), max_restarts=0,
                          monitor_interval=0.1, **rdzv)
    elastic_launch(config, entrypoint=binary)(*args)


if __name__ == "__main__":
    main()
