"""dcgm-exporter's inputs: its counters file (the package's default fields plus every field a rule
reads) and the folder of its HPC job mapping.

dcgm-exporter exports only the DCGM fields its counters file (``-f``) lists, and the file the
package ships (etc/default-counters.csv) comments out the throttling and NVLink error fields the
alerts need. The dcgm role installs this file instead (manifest entry ``dcgm/counters.csv``);
tests/test_alerts.py checks that every DCGM metric a rendered rule reads is in it.
"""

from __future__ import annotations

#: dcgm-exporter's --hpc-job-mapping-dir: one file per GPU index (DCGM's ``gpu`` label) holding the
#: ids of the jobs on that GPU, one a line; dcgm-exporter then labels the GPU's series ``hpc_job``
#: (internal/pkg/transformation/hpc.go). The Slurm prolog and epilog (templates/dcgm-job-map.sh.j2)
#: write and clear them; under /run, so a reboot forgets jobs that died with the node. The dcgm
#: role's dcgm_exporter_job_mapping_dir default is the same path (a test compares them).
JOB_MAPPING_DIR = "/run/dcgm-job-mapping"

#: Where the dcgm role installs the file and points dcgm-exporter's ``-f`` at.
COUNTERS_PATH = "/etc/dcgm-exporter/clusterforge-counters.csv"

#: The fields etc/default-counters.csv of NVIDIA/dcgm-exporter enables (the lines not commented
#: out) @ d5e5f510a1b6 (2026-05-12; a copy is tests/fixtures/exporters/dcgm-exporter-default-counters.csv):
#: (DCGM field, Prometheus type, help).
DEFAULT_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", "Total number of NVLink bandwidth counters for all lanes."),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both protocol "
     "headers and data payloads - in bytes per second."),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both protocol "
     "headers and data payloads - in bytes per second."),
)

#: Fields the default file leaves out that the alerts (render/alerts.py) and GPU panels read (help
#: texts as the default file's commented-out lines give them; no commas: a line is three CSV fields). The
#: names are go-dcgm's field names (dcgm-exporter maps CSV names through them); the bits of the
#: clock-event mask are dcgm_fields.h's DCGM_CLOCKS_EVENT_REASON_* (dcgm-exporter
#: internal/pkg/collector/clock_events_collector.go quotes them).
ENABLED_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge",
     "Bitmask of the reasons the clocks are below their maximum (DCGM_CLOCKS_EVENT_REASON_*)."),
    ("DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns)."),
    ("DCGM_FI_DEV_THERMAL_VIOLATION", "counter", "Throttling duration due to thermal constraints (in ns)."),
    ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink flow-control CRC errors."),
    ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink data CRC errors."),
    ("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink retries."),
    ("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "Total number of NVLink recovery errors."),
)


def counters() -> tuple[tuple[str, str, str], ...]:
    """Every field of the file: the defaults, then the enabled ones (each once)."""
    seen = {f for f, _, _ in DEFAULT_COUNTERS}
    return DEFAULT_COUNTERS + tuple(c for c in ENABLED_COUNTERS if c[0] not in seen)


def counters_csv(cluster: str) -> str:
    """The file dcgm-exporter reads: ``field, type, help`` lines ('#' lines are comments)."""
    lines = [
        f"# dcgm-exporter counters for cluster {cluster}, rendered by clusterforge: the package's default",
        "# fields plus the throttling and NVLink error fields the alerting rules read.",
        f"# The dcgm role installs it as {COUNTERS_PATH}; edit clusterforge, not the node.",
        "# DCGM field, Prometheus metric type, help message",
    ]
    lines += [f"{field}, {kind}, {text}" for field, kind, text in counters()]
    return "\n".join(lines) + "\n"
