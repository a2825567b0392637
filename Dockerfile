# syntax=docker/dockerfile:1
# The operator image: `ddp-operator run` as a non-root user; no build tools in the final stage.
#   docker build -t ddp-operator/operator:0.3.0 .
# BASE: any Python 3.11 image with pip (hack/cluster/image.sh passes a local Debian one).
ARG BASE=python:3.11-slim
FROM ${BASE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${BASE}
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-compile /wheels/*.whl && rm -rf /wheels \
 && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin ddp-operator
# The helpers the operator delivers to every worker, whatever its image (manifests/helpers_pod.py:
# an init container copies this folder, or an image volume mounts it): sitecustomize, the
# Lightning entry point and ddp_operator's progress modules (Python 3.9+, the standard library).
COPY helpers/ /opt/ddp-operator/helpers/
COPY operator/ddp_operator/progress.py operator/ddp_operator/progress_stacks.py operator/ddp_operator/lightning_progress.py /opt/ddp-operator/helpers/ddp_operator/
USER 10001
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
EXPOSE 8080 9090
# The chart gives its own arguments (`run ...`), replacing CMD.
ENTRYPOINT ["ddp-operator"]
CMD ["run", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz", "--metrics-port=9090"]
