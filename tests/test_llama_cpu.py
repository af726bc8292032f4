"""How llama.cpp loads models on this CPU (lmra/providers/_llama_cpu.py): no AMX weight buffers
where the CPU has AMX (llama.cpp's AMX matrix product can segfault on the first decode there)."""

import pytest

from lmra.providers import _llama_cpu as cpu

SAPPHIRE = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_vnni amx_bf16 amx_tile amx_int8 arch_perfmon\n"
EPYC = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_vnni sha_ni\nbugs\t\t: sysret_ss_attrs\n"


def test_amx_is_read_from_the_cpu_flags(tmp_path):
    (tmp_path / "amx").write_text(SAPPHIRE)
    (tmp_path / "no-amx").write_text(EPYC)
    (tmp_path / "amx-in-model-name").write_text("model name\t: amx_tile lookalike\nflags\t: fpu sse\n")
    assert cpu.cpu_has_amx(str(tmp_path / "amx"))
    assert not cpu.cpu_has_amx(str(tmp_path / "no-amx"))
    assert not cpu.cpu_has_amx(str(tmp_path / "amx-in-model-name"))
    assert not cpu.cpu_has_amx(str(tmp_path / "missing"))  # not Linux: llama.cpp's default


@pytest.mark.parametrize("env, flags, expected", [
    (None, SAPPHIRE, False), (None, EPYC, True), ("1", SAPPHIRE, True), ("0", EPYC, False), ("yes", SAPPHIRE, False)])
def test_extra_buffers_off_on_amx_unless_the_environment_says(tmp_path, monkeypatch, env, flags, expected):
    (tmp_path / "cpuinfo").write_text(flags)
    if env is None:
        monkeypatch.delenv(cpu.EXTRA_BUFFERS_ENV, raising=False)
    else:
        monkeypatch.setenv(cpu.EXTRA_BUFFERS_ENV, env)
    assert cpu.use_extra_buffers(str(tmp_path / "cpuinfo")) is expected


def test_model_params_set_extra_buffers_while_they_last_and_nest():
    import llama_cpp.llama_cpp as ll

    default = ll.llama_model_default_params
    assert default().use_extra_bufts  # llama.cpp's own default
    with cpu.model_params(False):
        assert ll.llama_model_default_params().use_extra_bufts is False
    assert ll.llama_model_default_params is default
    cpu.patch_process()  # a server process: the setting stays; patching again wraps the default, not the patch
    try:
        cpu.patch_process()
        assert ll.llama_model_default_params.lmra_default is default
        with cpu.model_params(True):
            assert ll.llama_model_default_params().use_extra_bufts is True
    finally:
        ll.llama_model_default_params = default


def test_the_embedded_model_is_loaded_with_this_cpus_setting():
    from lmra.config import ModelConfig
    from lmra.providers.llamacpp import LlamaCppProvider

    prov = LlamaCppProvider.shared(ModelConfig())
    assert bool(prov._llm.model_params.use_extra_bufts) is cpu.use_extra_buffers()
