"""NCCL acceptance: read nccl-tests output, compare busbw with published figures, name slow nodes.

``examples/jobs/nccl-allreduce.sbatch`` writes ``node-<name>.out`` (each node alone) and
``all.out`` (all nodes together); ``clusterforge nccl-verdict DIR --expect TYPE`` judges them.
"""

from clusterforge.nccl_verdict.expected import Expectation, load_expectations
from clusterforge.nccl_verdict.parse import NcclOutputError, NcclRow, NcclRun, parse_file, parse_text
from clusterforge.nccl_verdict.report import collect_inputs, format_verdict
from clusterforge.nccl_verdict.verdict import GIB, Judged, Verdict, judge, large_message

__all__ = [
    "GIB",
    "Expectation",
    "Judged",
    "NcclOutputError",
    "NcclRow",
    "NcclRun",
    "Verdict",
    "collect_inputs",
    "format_verdict",
    "judge",
    "large_message",
    "load_expectations",
    "parse_file",
    "parse_text",
]
