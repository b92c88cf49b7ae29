# The phasemeter worker/CLI image (used by docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml constraints.txt README.md ./
COPY phasemeter ./phasemeter
COPY producers ./producers
COPY stream_jobs ./stream_jobs
COPY schema ./schema
COPY sql ./sql
RUN pip install --no-cache-dir -c constraints.txt ".[worker,charts]"
RUN useradd --create-home phasemeter
USER phasemeter
ENV PHASEMETER_DATA_DIR=/home/phasemeter/data
ENTRYPOINT ["phasemeter"]
CMD ["worker"]
