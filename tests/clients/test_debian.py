"""A client test missing Debian packages fails under CI, and skips elsewhere, naming them."""

from __future__ import annotations

import pytest

from tests.clients.debian import packages_for, require_packages

ABSENT = "turnwire-no-such-package"


def test_a_missing_package_fails_under_ci_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """CI=true: pytest.fail, and the message names the package that is missing."""
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=ABSENT):
        require_packages("go", ABSENT)


def test_a_missing_package_skips_elsewhere_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CI: pytest.skip, with the same words."""
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=ABSENT):
        require_packages("go", ABSENT)


def test_the_package_list_names_the_go_and_java_toolchains() -> None:
    """clients/debian-packages.txt: each language's compiler and gRPC library are listed."""
    assert {"golang-go", "golang-google-grpc-dev", "protoc-gen-go-grpc"} <= set(packages_for("go"))
    assert {"openjdk-17-jdk-headless", "libgrpc-java", "protobuf-compiler-grpc-java-plugin"} <= set(
        packages_for("java")
    )
