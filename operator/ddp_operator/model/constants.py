"""Names shared by the CRD, the builders, the handlers and the CLI."""

from __future__ import annotations

GROUP = "ddp-operator.io"
VERSION = "v1alpha1"
KIND = "DDPJob"
PLURAL = "ddpjobs"
API_VERSION = f"{GROUP}/{VERSION}"

# Labels on every object the operator creates.
LABEL_JOB = f"{GROUP}/job-name"
LABEL_INDEX = f"{GROUP}/worker-index"
# The attempt a pod was created in (Recreate: the one it runs; in place: the first it ran, the
# one it runs being ATTEMPT_ANNOTATION). Builds up to 0.2.0 wrote it as LEGACY_LABEL_ATTEMPT, the
# annotation's key: read still, for their pods.
LABEL_ATTEMPT = f"{GROUP}/created-in-attempt"
LEGACY_LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "ddp-operator"
# spec.managedBy: unset or this value means this operator; any other (Kueue's MultiKueue on its
# manager cluster: kueue.x-k8s.io/multikueue) means another controller, and this operator does
# nothing with the job: no object, no status, no Event.
MANAGED_BY = "ddp-operator.io/ddp-operator"

# Prefix for kopf's own bookkeeping (finalizer, progress and diff-base annotations).
FINALIZER = f"{GROUP}/finalizer"

# The audience of the pod-bound tokens worker pods report progress with (``progress_pod``).
PROGRESS_AUDIENCE = f"{GROUP}/progress"

TRAINER_CONTAINER = "trainer"
WORKER_ROLE = "worker"
SHM_VOLUME = "ddp-shm"
SHM_PATH = "/dev/shm"

DEFAULT_MASTER_PORT = 29500
DEFAULT_BACKOFF_LIMIT = 3
DEFAULT_HCCL_BASE_PORT = 60000
HCCL_PORT_COUNT = 32  # newer CANN releases use 32 ports from HCCL_IF_BASE_PORT; older ones 16

# Accelerator resources: the backend each implies, and whether it is an Ascend NPU.
NVIDIA_GPU = "nvidia.com/gpu"
ASCEND_PREFIX = "huawei.com/Ascend"
ASCEND_910 = "huawei.com/Ascend910"
ASCEND_910_PER_NODE = (1, 2, 4, 8)

BACKEND_NCCL = "nccl"
BACKEND_HCCL = "hccl"
BACKEND_GLOO = "gloo"

# The env contract: names the operator sets on the trainer container. A user env entry with one
# of these names is refused by the CRD (CEL), so the operator's values always win.
ENV_BACKEND = "DDP_BACKEND"
ENV_JOB_NAME = "DDP_JOB_NAME"
ENV_ATTEMPT = "DDP_ATTEMPT"
ENV_HOSTS = "VC_WORKER_HOSTS"  # from the job's ConfigMap (``job_configmap``)
# Where to resume: the job's last checkpoint when the container starts (``decide/checkpoints``),
# from the job's ConfigMap. Not reserved: a template's own entry (a resume forced by hand) wins.
ENV_RESUME_STEP = "DDP_RESUME_STEP"
ENV_RESUME_PATH = "DDP_RESUME_PATH"
RESUME_ENV = (ENV_RESUME_STEP, ENV_RESUME_PATH)
# Kubeflow Trainer's status path (KEP-2779), served beside ours (``decide/kubeflow_status``).
KUBEFLOW_STATUS_ROUTE = (
    "/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
)
RESERVED_ENV = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "NNODES",
    "NODE_RANK",
    "NPROC_PER_NODE",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "PET_NNODES",
    "PET_NODE_RANK",
    "PET_NPROC_PER_NODE",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_RDZV_BACKEND",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_ID",
    "PET_RDZV_CONF",
    ENV_BACKEND,
    ENV_JOB_NAME,
    ENV_ATTEMPT,
    "MA_NUM_HOSTS",
    "MA_NUM_GPUS",
    "MA_TASK_NAME",
    "MA_VJ_NAME",
    "VC_TASK_INDEX",
    "VC_WORKER_NUM",
    ENV_HOSTS,
    "HCCL_IF_BASE_PORT",
)

# A worker whose node stops answering is evicted this long after the node is marked unreachable
# or not ready (NoExecute taints; Kubernetes' default is 300 s); the group then restarts
# elsewhere. A template that tolerates these taints itself keeps its own values.
NODE_LOST_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
NODE_LOST_GRACE_SECONDS = 30

# Gang schedulers (spec.gangScheduling.scheduler) and the scheduler names their pods go to by
# default (spec.schedulerName overrides): Kubernetes' own scheduler, scheduler-plugins' as a
# second scheduler (its manifests' name), Volcano's.
GANG_KUBERNETES = "Kubernetes"
GANG_COSCHEDULING = "Coscheduling"
GANG_VOLCANO = "Volcano"
# How a pod names its group for scheduler-plugins (label) and Volcano (annotation).
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
GANG_SCHEDULER_NAMES = {
    GANG_KUBERNETES: None,
    GANG_COSCHEDULING: "scheduler-plugins-scheduler",
    GANG_VOLCANO: "volcano",
}

# Kueue's plain-pod group integration: a DDPJob labelled with a LocalQueue runs its workers as
# one pod group that Kueue admits (ungates) whole, evicts whole, and ends when a member says so.
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
# Each worker's index in the group: Kueue's topology-aware scheduling places ranks in its order.
KUEUE_INDEX_LABEL = "kueue.x-k8s.io/pod-group-pod-index"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_RETRIABLE_ANNOTATION = "kueue.x-k8s.io/retriable-in-group"
KUEUE_MANAGED_LABEL = "kueue.x-k8s.io/managed"  # set by Kueue's webhook on pods it manages
KUEUE_FINALIZER = "kueue.x-k8s.io/managed"  # and its finalizer on them
KUEUE_GATE = "kueue.x-k8s.io/admission"  # the scheduling gate Kueue lifts on admission
KUEUE_QUOTA_RESERVED = "QuotaReserved"  # the Workload condition saying why it waits
KUEUE_WORKLOAD_API = ("kueue.x-k8s.io", "v1beta2", "workloads")
KUEUE_FLAVOR_API = ("kueue.x-k8s.io", "v1beta2", "resourceflavors")
# A job-level Workload (``kueue_workload``): where MultiKueue's copy of a job on a worker cluster
# names the Workload it was admitted with (an annotation since Kueue 0.19, a label before), the
# managedBy value of a job that MultiKueue runs elsewhere, and the Workload's one pod set.
KUEUE_PREBUILT = "kueue.x-k8s.io/prebuilt-workload-name"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
KUEUE_POD_SET = "workers"
# Kueue's topology-aware scheduling: what a template asks for (the level, a node label), and what
# the pods of a job-level Workload admitted with a topology assignment carry for Kueue to place
# them (its gate, lifted with a node selector per pod; their Workload and pod set).
KUEUE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
KUEUE_WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
KUEUE_POD_SET_LABEL = "kueue.x-k8s.io/podset"
KUEUE_STOPPED_CONDITION = "TerminationTarget"  # the pod condition Kueue sets before deleting

# The pod condition the control plane sets on a pod it takes away (eviction, preemption, ...).
DISRUPTION_TARGET = "DisruptionTarget"

# The phases that are final, of a worker pod and of a DDPJob alike.
FINISHED_PHASES = ("Succeeded", "Failed")

# Condition types written to status.conditions.
COND_CREATED = "Created"
COND_RUNNING = "Running"
COND_RESTARTING = "Restarting"
COND_SUCCEEDED = "Succeeded"
COND_FAILED = "Failed"
COND_SUSPENDED = "Suspended"
COND_UNSCHEDULABLE = "Unschedulable"
COND_NOT_STARTING = "ContainersNotStarting"
COND_BLOCKED = "Blocked"
COND_GANG = "GangScheduled"
COND_QUEUED = "Queued"
COND_ADMITTED = "Admitted"
COND_NODES_EXCLUDED = "NodesExcluded"  # nodes a failure was blamed on, kept out (``exclusion``)
COND_IN_PLACE = "InPlaceRestart"  # False (with why) where the cluster refuses in-place pods

# Restart strategies (spec.restartStrategy): a failed group restarts in place (the kubelet
# restarts every container of every worker pod: Kubernetes 1.35+ RestartAllContainers) or is
# deleted and created again.
RESTART_IN_PLACE = "InPlace"
RESTART_RECREATE = "Recreate"
# What an in-place worker pod carries: its attempt as an annotation (DDP_ATTEMPT is taken from it
# at each start) and a watch container that exits RESTART_EXIT_CODE (its rule:
# RestartAllContainers) once the pod's attempt moves on, or 0 once the job has finished.
ATTEMPT_ANNOTATION = f"{GROUP}/attempt"
FINISHED_ANNOTATION = f"{GROUP}/finished"
# Written with the attempt it gives a pod: when (RFC 3339), its trainer's restart count then, and
# the ID of the trainer's container then (a status still of that run is no end of the attempt).
TOLD_AT_ANNOTATION = f"{GROUP}/told-at"
TOLD_RESTARTS_ANNOTATION = f"{GROUP}/restarts-when-told"
TOLD_CONTAINER_ANNOTATION = f"{GROUP}/container-when-told"
# When the operator last nudged a told pod not yet restarted: any change of a pod has its
# kubelet sync it, refreshing the watch's volume (``decide.inplace``).
NUDGED_AT_ANNOTATION = f"{GROUP}/nudged-at"
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
WATCH_CONTAINER = "ddp-attempt-watch"
# The operator's helpers in every worker (``manifests.helpers_pod``): their volume, and the init
# container that copies them there where they are not an image volume.
HELPERS_VOLUME = "ddp-helpers"
HELPERS_CONTAINER = "ddp-helpers"
ATTEMPT_VOLUME = "ddp-attempt"
RESTART_EXIT_CODE = 86
# The watch's judgement of its trainer's processes (``inplace_pod``, ``decide.quiet``): quiet when
# none used QUIET_PERCENT of a CPU core over a window of QUIET_WINDOW_SECONDS, once one had used
# more (measured: a gloo rank blocked in a collective, or asleep, 0.7%; torchrun's agent 0.4%).
# Its readiness says it, on the pod's ContainersReady condition, every QUIET_PROBE_SECONDS.
ACTIVITY_VOLUME = "ddp-activity"
QUIET_WINDOW_SECONDS = 10
QUIET_PERCENT = 5
QUIET_PROBE_SECONDS = 10
# A quiet rank says where it stands again every STACK_RESEND_SECONDS while its spell lasts
# (``progress_stacks.RESEND``): a rank's latest stack older than two of them is no longer quiet.
STACK_RESEND_SECONDS = 30
# An in-place pod whose trainer ended, told nothing for this long, ends alone (``inplace_pod``).
RELEASE_AFTER_SECONDS = 300
WATCH_LACKS_EXIT_CODE = 127  # the watch found no command it needs in the trainer's image
IN_PLACE_FEATURE = "RestartAllContainersOnContainerExits"  # the feature gate a node declares
# The kubelet begins an in-place restart within seconds (measured: 1-3 s); one that has not begun
# this long after the operator asked for it is not coming (a kubelet without the feature).
IN_PLACE_TIMEOUT_SECONDS = 60
# torchrun's restarts of its workers (PET_MAX_RESTARTS) in an elastic job, unless the template
# sets it: each lost or removed node costs every agent one; past them, the group restarts.
ELASTIC_MAX_RESTARTS = 3

# Success and clean-up policies.
SUCCESS_ALL_WORKERS = "AllWorkers"
SUCCESS_WORKER0 = "Worker0"
CLEAN_RUNNING = "Running"
CLEAN_ALL = "All"
CLEAN_NONE = "None"
