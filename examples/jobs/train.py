"""A tiny distributed training script for examples/jobs/torchrun.sbatch: checkpoints, resumes.

Started by torchrun (one worker per GPU, or one per node on CPU): a small linear model trained
with DistributedDataParallel on data made from the step number, so every run is reproducible.
The backend follows the node: NCCL when the worker has a GPU, gloo on CPU.

* Resume: when CKPT_DIR holds ``checkpoint.pt``, every rank loads it (the folder is on shared
  storage) and training continues at the step after the saved one.
* Checkpoints: every ``--ckpt-every`` steps and when SIGUSR1 arrives; rank 0 writes
  ``checkpoint.pt.tmp``, flushes it to disk and renames it over ``checkpoint.pt`` (a rename is
  atomic on one file system), so a job killed while saving still finds the previous checkpoint.
* SIGUSR1 (the batch script forwards it, see torchrun.sbatch): each rank notes it; after each
  step the ranks all-reduce the note, so they stop at the same step, save, and exit 0; the batch
  script then requeues the job.

Each step prints one line on rank 0: ``train: restart=R step=N loss=...`` (R is
SLURM_RESTART_COUNT), and the events ``train: resumed from step N`` / ``train: checkpoint step=N
(signal|periodic|final)``, so a log shows where a run stopped and where the next one began.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

CHECKPOINT = "checkpoint.pt"
_signalled = False


def _on_usr1(signum: int, frame: FrameType | None) -> None:
    global _signalled
    _signalled = True


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt-dir", type=Path, required=True, help="checkpoint folder on shared storage")
    ap.add_argument("--steps", type=int, default=100, help="train until this step")
    ap.add_argument("--ckpt-every", type=int, default=20, help="periodic checkpoint every N steps")
    ap.add_argument("--step-seconds", type=float, default=0.0, help="sleep per step (to watch a run)")
    ap.add_argument("--lr", type=float, default=0.05)
    return ap.parse_args()


def batch(step: int, rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of step ``step``: y = x . w_true + noise, the same on every run."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = torch.randn(32, 16, generator=g)
    w_true = torch.arange(16, dtype=torch.float32) / 16
    y = x @ w_true + 0.01 * torch.randn(32, generator=g)
    return x.to(device), y.unsqueeze(1).to(device)


def save(ckpt_dir: Path, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Rank 0 writes the checkpoint atomically: a temporary file, fsync, rename, fsync the folder."""
    tmp = ckpt_dir / (CHECKPOINT + ".tmp")
    with open(tmp, "wb") as fh:
        torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, ckpt_dir / CHECKPOINT)
    fd = os.open(ckpt_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGUSR1, _on_usr1)  # torchrun.sbatch starts the agents with it ignored
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        backend, device = "nccl", torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        backend, device = "gloo", torch.device("cpu")
    dist.init_process_group(backend)  # rank, world size and the store come from torchrun
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))

    torch.manual_seed(0)
    model = nn.Linear(16, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    start = 1
    ckpt = args.ckpt_dir / CHECKPOINT
    if ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"]) + 1
        if rank == 0:
            print(f"train: resumed from step {state['step']} (restart={restart})", flush=True)
    ddp = DistributedDataParallel(model)
    if rank == 0:
        print(f"train: backend={backend} world={world} steps {start}..{args.steps} restart={restart}", flush=True)

    loss_fn = nn.MSELoss()
    step = start - 1
    for step in range(start, args.steps + 1):
        x, y = batch(step, rank, device)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # DDP all-reduces the gradients
        opt.step()
        if rank == 0:
            print(f"train: restart={restart} step={step} loss={loss.item():.6f}", flush=True)
        # every rank learns whether any rank was signalled, so all stop after the same step
        stop = torch.tensor([1.0 if _signalled else 0.0], device=device)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)
        why = "signal" if stop.item() > 0 else "periodic" if step % args.ckpt_every == 0 else ""
        if why or step == args.steps:
            if rank == 0:
                save(args.ckpt_dir, step, model, opt)
                print(f"train: checkpoint step={step} ({why or 'final'})", flush=True)
            dist.barrier()
        if why == "signal":
            break
        if args.step_seconds:
            time.sleep(args.step_seconds)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
