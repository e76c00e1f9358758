ARG BASE=debian:bookworm-slim
FROM ${BASE} AS build
RUN echo building > /out.txt

FROM ${BASE}
COPY --from=build /out.txt /out.txt
CMD ["cat", "/out.txt"]
