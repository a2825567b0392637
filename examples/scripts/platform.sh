#!/bin/sh
# A platform-style launch script, as written for ModelArts/Volcano: everything is derived from
# the platform's variables, then torch.distributed.run is called with explicit flags.
set -eu
MASTER_HOST="${VC_WORKER_HOSTS%%,*}"
echo "platform.sh: node ${VC_TASK_INDEX} of ${MA_NUM_HOSTS}, ${MA_NUM_GPUS} devices, master ${MASTER_HOST}"
echo "platform.sh: hosts ${VC_WORKER_HOSTS}"
exec python -m torch.distributed.run \
  --nnodes="${MA_NUM_HOSTS}" \
  --node_rank="${VC_TASK_INDEX}" \
  --nproc_per_node="${MA_NUM_GPUS}" \
  --master_addr="${MASTER_HOST}" \
  --master_port=29500 \
  "$(dirname "$0")/allreduce.py"
