#!/bin/bash
# Recipe e = recipe d in the overlap layout (`make own-sft-cpu OWN_RECIPE=e OWN_BASELINE=d`),
# the source of pasta-sft-overlap-cpu. Resumable: rerun.
cd /work/main
export HF_HUB_OFFLINE=1 OMP_NUM_THREADS=${THREADS:-1}
make own-sft-cpu OWN_RECIPE=e OWN_BASELINE=d >> runs/own/e/train.log 2>&1 || exit 1
echo trained >> runs/own/e/train.log
