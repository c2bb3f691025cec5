# attnserve's service image; one file for both flavours (docs/DEPLOY.md):
#   docker build -t attnserve:cpu .
#   docker build -t attnserve:gpu --build-arg FLAVOUR=gpu .
#   docker build -t attnserve-loadtest --target loadtest .   # the load tester alone
# Any bundle: bake one in with --build-arg BUNDLE_DIR=bundles/NAME (a folder under bundles/ in the context),
# or mount one at run time and point ATTNSERVE_BUNDLE at it; `--target bundle` builds an image of the bundle
# alone, for a Kubernetes init container (docs/DEPLOY.md, "Your own model").
# The GPU flavour takes ONNX Runtime's CUDA build with CUDA and cuDNN from wheels, so the base stays a
# plain Python image; the host needs only the NVIDIA driver and the NVIDIA container toolkit.
ARG BASE_IMAGE=python:3.11-slim

# ---- build: resolve and install the service into a venv; only the venv reaches the runtime stage
FROM ${BASE_IMAGE} AS build
ARG FLAVOUR=cpu
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
SHELL ["/bin/sh", "-eu", "-c"]
RUN case "${FLAVOUR}" in cpu|gpu) ;; *) echo "FLAVOUR must be cpu or gpu, not '${FLAVOUR}'" >&2; exit 1;; esac \
 && python3 -m venv /opt/attnserve
WORKDIR /src
# Dependencies first, from pyproject.toml alone (no packages yet, so it builds an empty distribution):
# a code change then rebuilds only the small layers below, not the ONNX Runtime install.
# The core's dependencies and the server's extra; the gpu flavour puts onnxruntime-gpu (the `gpu` extra) in the place
# of the core's onnxruntime: both wheels install the module `onnxruntime`, and one would overwrite the other's files.
COPY pyproject.toml README.md LICENSE ./
RUN /opt/attnserve/bin/python -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; x = p["optional-dependencies"]; gpu = sys.argv[1] == "gpu"; print("\n".join([d for d in p["dependencies"] if not (gpu and d.startswith("onnxruntime"))] + x["serve"] + (x["gpu"] if gpu else [])))' "${FLAVOUR}" > /tmp/requirements.txt \
 && /opt/attnserve/bin/pip install --quiet -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt
# Only the service: training/ and export/ need torch and stay out of the image, and so do the
# console scripts of the packages left out (they would only fail on import), and pip itself.
# attnserve/ is the namespace: links to the stage folders, of which only service/ is here (attnserve/models
# links to nothing here, so the package carries no model: the image's bundle is ATTNSERVE_BUNDLE's, below).
COPY attnserve/ attnserve/
COPY service/ service/
RUN /opt/attnserve/bin/pip install --quiet --no-deps --force-reinstall . \
 && /opt/attnserve/bin/pip uninstall --quiet --yes pip setuptools \
 && site="$(/opt/attnserve/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && for script in /opt/attnserve/bin/attnserve-*; do \
      pkg="$(sed -n '/^from /{s/^from \([A-Za-z_.]*\) import.*/\1/p;q;}' "${script}" | tr . /)"; \
      [ -d "${site}/${pkg}" ] || rm "${script}"; \
    done

# ---- variant: the bundle as the image serves it: BUNDLE_DIR, the default model unless given. The GPU flavour
# adds the fp16 v2 variant (CUDA's default) from the bundle's own fp32 graphs with `attnserve-export
# add-variant`, which needs export/ and training/weights.py but no torch; neither reaches the runtime stage.
# The CPU checks run here (no GPU at build time); attnserve-gpu-check proves CUDA parity on the host.
FROM build AS variant
ARG FLAVOUR=cpu
ARG BUNDLE_DIR=models/g2p-en
COPY ${BUNDLE_DIR} /bundle/model
COPY export/ export/
COPY training/ training/
RUN test -f /bundle/model/bundle.json || { echo "BUNDLE_DIR=${BUNDLE_DIR} holds no bundle.json" >&2; exit 1; } \
 && if [ "${FLAVOUR}" = gpu ]; then \
      PYTHONPATH=/src /opt/attnserve/bin/python -c \
        'import sys; from attnserve.export.cli import main; sys.exit(main(sys.argv[1:]))' add-variant /bundle/model fp16 --provider cpu; \
    fi

# ---- bundle: the bundle alone at the path the service image has it, for a Kubernetes init container that
# copies it into the pod's bundle volume (deploy/k8s/deployment.yaml): a new model without a new service image.
FROM ${BASE_IMAGE} AS bundle
COPY --from=variant /bundle/model /opt/attnserve/bundle
USER 10001:10001
CMD ["cp", "-R", "/opt/attnserve/bundle/.", "/bundles/current/"]

# ---- loadtest: `attnserve-loadtest` alone, for the compose stack's loadtest profile
FROM ${BASE_IMAGE} AS loadtest
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
RUN python3 -m venv /opt/attnserve-loadtest \
 && /opt/attnserve-loadtest/bin/pip install --quiet ".[loadtest]"
COPY attnserve/ attnserve/
COPY loadtest/ loadtest/
RUN /opt/attnserve-loadtest/bin/pip install --quiet --no-deps --force-reinstall . \
 && rm -rf /src \
 && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin attnserve
ENV PATH=/opt/attnserve-loadtest/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp
WORKDIR /tmp
USER 10001:10001
ENTRYPOINT ["attnserve-loadtest"]
CMD ["--help"]

# ---- runtime (the default target): the base image, the venv and the default model bundle, non-root
FROM ${BASE_IMAGE} AS runtime
ARG FLAVOUR=cpu
LABEL org.opencontainers.image.title="attnserve" \
      org.opencontainers.image.description="Seq2seq Transformer generation over HTTP on ONNX Runtime (${FLAVOUR})" \
      org.opencontainers.image.licenses="MIT"
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin attnserve
COPY --from=build /opt/attnserve /opt/attnserve
# GPU flavour: CUDA and cuDNN come as wheels inside the venv (site-packages/nvidia/*/lib); the dynamic
# loader is told where, so ONNX Runtime's CUDA provider finds them without LD_LIBRARY_PATH.
RUN if [ "${FLAVOUR}" = gpu ]; then \
      find /opt/attnserve -type d -path '*/site-packages/nvidia/*/lib' > /etc/ld.so.conf.d/attnserve-cuda.conf \
      && ldconfig; \
    fi
# The bundle baked in (BUNDLE_DIR; with the fp16 variant in the GPU flavour), read-only to the service user.
# Another one at run time: mount it (say at /bundles/NAME, read-only) and set ATTNSERVE_BUNDLE=/bundles/NAME.
COPY --from=variant /bundle/model /opt/attnserve/bundle
ENV PATH=/opt/attnserve/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ATTNSERVE_HOST=0.0.0.0 \
    ATTNSERVE_PORT=8000 \
    ATTNSERVE_BUNDLE=/opt/attnserve/bundle
WORKDIR /opt/attnserve
USER 10001:10001
EXPOSE 8000
# The image has no curl: the venv's python asks /health (which stays open when ATTNSERVE_API_KEY is set).
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('ATTNSERVE_PORT', '8000') + '/health', timeout=2)"]
# SIGTERM starts the drain (in-flight requests finish, new ones get 503 draining) for up to
# ATTNSERVE_DRAIN_TIMEOUT_S (30 s): give `docker stop -t` / stop_grace_period more than that.
STOPSIGNAL SIGTERM
CMD ["attnserve-serve"]
