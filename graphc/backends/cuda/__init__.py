"""The CUDA backend: `emitter` (kernel IR to NVVM IR, the shared emitter with the GPU's
hooks), `program` (PTX and the runtime's launch table), `backend` (the Backend)."""
