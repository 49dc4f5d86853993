"""Test support shared by every test package: the reference model of DESIGN.md's rules (the
oracle of the property tests and the crash harness), the fake clock, the fault-injecting file
system, the in-process CLI runner and the hypothesis command strategies."""
