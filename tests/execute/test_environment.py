"""Under the prefixes whose families are large (NCCL_, CUDA_, TORCH*, PYTORCH_, SLURM_) only the names the frameworks
document reach a trial (execute/env_names.py), whatever the value; workload.pass_env is the door for the rest."""

from infrarsi.execute.environment import clean_environment

DOCUMENTED = {"NCCL_DEBUG": "WARN", "NCCL_IB_HCA": "mlx5_0,mlx5_1", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
              "CUDA_LAUNCH_BLOCKING": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCHINDUCTOR_CACHE_DIR": "/tmp/i",
              "TORCH_LOGS": "+dynamo", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
              "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "node[01-04]",
              "SLURM_NTASKS_PER_NODE": "8", "TORCHELASTIC_RUN_ID": "none"}
# plain values (no URL, no scheme, no high-entropy word) under names nobody documents: a mirror's name, an
# organisation, a short password
UNDOCUMENTED = {"NCCL_MIRROR": "internal", "CUDA_LICENSE_SERVER": "lic01", "TORCH_ORG": "acme",
                "PYTORCH_DB": "hunter2", "SLURM_ACCOUNTING_DB": "hunter2", "TORCHHUB_MIRROR": "internal"}


def test_under_the_large_prefixes_only_documented_names_pass():
    got = clean_environment({**DOCUMENTED, **UNDOCUMENTED})
    assert got == DOCUMENTED


def test_pass_env_is_the_door_for_an_undocumented_name():
    got = clean_environment({**DOCUMENTED, **UNDOCUMENTED}, pass_env=["TORCH_ORG"])
    assert got == {**DOCUMENTED, "TORCH_ORG": "acme"}
