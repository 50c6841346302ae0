# The README's two commands:
#   make deploy   set up everything, boot a lab host, deploy onto it
#   make test     lint, unit and contract tests, every molecule scenario
SHELL := /bin/bash
export PATH := $(CURDIR)/.venv/bin:$(PATH)
LAB_HOSTS ?= 1

.PHONY: bootstrap lab deploy lab-down test lint sanity docs pytest molecule collection bench

bootstrap:
	@./scripts/bootstrap.sh

lab: bootstrap
	ansible-playbook playbooks/lab.yml -e '{"lab_hosts_count": $(LAB_HOSTS)}'

deploy: lab
	ansible-playbook deploy.yml

lab-down: bootstrap
	ansible-playbook playbooks/lab_teardown.yml

test: bootstrap
	@./scripts/test.sh

lint: bootstrap
	@./scripts/test.sh lint

sanity: bootstrap
	@./scripts/test.sh sanity

docs: bootstrap
	@./scripts/test.sh docs

pytest: bootstrap
	@./scripts/test.sh pytest

molecule: bootstrap
	@./scripts/test.sh molecule

bench: bootstrap
	python bench/bench.py

collection: bootstrap
	ansible-galaxy collection build --force
