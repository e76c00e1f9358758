#!/usr/bin/env bash
# Helpers sourced by main.sh.

greet() {
  echo "hello, $1"
}
