"""The engine: durable tasks, signals, sleeps, the harness loop and the store port.

It imports no feature built on it (tools, agents, workflows, design 002's features) and never
talks to AWS or the network; its public names are re-exported by :mod:`bide`.
"""
