/*
 * pipeline.h - the in-order session: line, RESP and HTTP clients, each
 * request framed and parsed by the front end's struct proto, run by cmd, and
 * answered strictly in request order (pipeline.c).
 */
#ifndef RL_PIPELINE_H
#define RL_PIPELINE_H

#include "session.h"

extern const struct session_ops pipeline_ops;

#endif
