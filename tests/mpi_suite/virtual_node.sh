#!/bin/sh
# Runs a rank as a node of its own host name: node<rank / ranks per node>
# (FERRY_SUITE_RANKS_PER_NODE, 2 by default), from the launcher's rank.
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
FERRY_HOSTNAME=node$((rank / ${FERRY_SUITE_RANKS_PER_NODE:-2}))
export FERRY_HOSTNAME
exec "$@"
