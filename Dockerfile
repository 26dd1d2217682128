# planq: one image for the migrate, worker, beat and flower services of docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A fixed non-root user (no planq process needs root), and the beat schedule directory it
# owns (a named volume first mounted there inherits the owner).
RUN groupadd --system --gid 10001 planq \
    && useradd --system --uid 10001 --gid planq --create-home --home-dir /home/planq planq \
    && install -d -o planq -g planq /var/lib/planq/beat

# The runtime dependencies only: no [dev] extra, no tests (pyproject.toml asks for
# kombu[redis]: its Redis transport imports `packaging`, which only that extra brings).
# First the dependencies alone, read from pyproject.toml: this layer is rebuilt only when
# pyproject.toml changes, not on every change to planq's code.
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt

# Then planq itself, without resolving anything again. The source is removed after the
# install; the package lives in site-packages, so `celery -A planq.worker_config` works from
# any directory.
COPY README.md LICENSE ./
COPY domain ./domain
COPY store ./store
COPY tasks ./tasks
COPY worker_config ./worker_config
COPY cli ./cli
RUN pip install --no-deps . && pip check && cd / && rm -rf /src

USER planq
WORKDIR /home/planq

# docker-compose.yml gives each service its command; alone, the image runs a worker.
CMD ["celery", "-A", "planq.worker_config", "worker", "-P", "prefork", "--hostname", "worker@%h", "--loglevel", "INFO"]
