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
    (None, SAPPHIRE, False), (None, EPYC, True), ("1", SAPPHIRE, True), ("0", EPYC, False), ("yes", SAPPHIRE, True), ("off", EPYC, False)])
def test_extra_buffers_off_on_amx_unless_the_environment_says(tmp_path, monkeypatch, env, flags, expected):
    (tmp_path / "cpuinfo").write_text(flags)
    if env is None:
        monkeypatch.delenv(cpu.EXTRA_BUFFERS_ENV, raising=False)
    else:
        monkeypatch.setenv(cpu.EXTRA_BUFFERS_ENV, env)
    assert cpu.use_extra_buffers(str(tmp_path / "cpuinfo")) is expected


def test_model_params_set_extra_buffers_in_their_thread_only_and_patch_process_stays():
    """A model_params block sets use_extra_bufts for loads in its own thread while it lasts (a
    load in another thread meanwhile keeps llama.cpp's default); nested blocks restore the
    outer one; patch_process's setting holds for every thread and outlives later blocks."""
    import threading

    import llama_cpp.llama_cpp as ll

    from lmra.providers import _llama_cpu as mod

    default = getattr(ll.llama_model_default_params, "lmra_default", ll.llama_model_default_params)
    assert default().use_extra_bufts  # llama.cpp's own default
    seen = {}

    def other_thread():
        seen["other"] = ll.llama_model_default_params().use_extra_bufts

    try:
        with cpu.model_params(False):
            assert ll.llama_model_default_params().use_extra_bufts is False
            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
            with cpu.model_params(True):
                assert ll.llama_model_default_params().use_extra_bufts is True
            assert ll.llama_model_default_params().use_extra_bufts is False
        assert seen["other"] is True
        assert ll.llama_model_default_params().use_extra_bufts is True
        wrapper = ll.llama_model_default_params
        mod._process_setting[0] = False  # as patch_process on an AMX CPU
        cpu.patch_process()  # installs nothing twice
        assert ll.llama_model_default_params is wrapper
        mod._process_setting[0] = False
        with cpu.model_params(True):
            assert ll.llama_model_default_params().use_extra_bufts is True
        assert ll.llama_model_default_params().use_extra_bufts is False  # the process setting stays
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        assert seen["other"] is False
    finally:
        mod._process_setting[0] = None


def test_the_embedded_model_is_loaded_with_this_cpus_setting():
    from lmra.config import ModelConfig
    from lmra.providers.llamacpp import LlamaCppProvider

    prov = LlamaCppProvider.shared(ModelConfig())
    assert bool(prov._llm.model_params.use_extra_bufts) is cpu.use_extra_buffers()


def test_a_context_llama_cpp_cannot_create_is_blamed_on_n_ctx_not_the_model_file(tmp_path, monkeypatch, capsys):
    """Break-it finding: an n_ctx within its documented range that needs more memory than the
    machine has failed as "llama.cpp cannot load this file as a GGUF model (Failed to create
    llama_context)", field 'target.model' — the file was fine (n_ctx = 4096 ran). llama.cpp's own
    error (here raised as llama-cpp-python raises it) now names n_ctx."""
    import lmra.providers.llamacpp as backend
    from lmra.cli import main

    def no_context(**kw):
        raise ValueError("Failed to create llama_context")

    monkeypatch.setattr(backend, "load_llama", no_context)
    cfg = tmp_path / "big.toml"
    cfg.write_text('name = "big"\nprompts_per_task = 1\ntasks = ["write a story"]\n'
                   f'output_dir = "{tmp_path / "out"}"\ncache = "{tmp_path / "c.sqlite"}"\n'
                   '[judge_check]\nenabled = false\n[target]\nprovider = "llamacpp"\nn_ctx = 262144\n')
    assert main(["audit", "--config", str(cfg), "--no-progress", "--no-report"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "field 'target.n_ctx'" in err and "could not create a context of n_ctx = 262,144 tokens" in err, err
    assert "cannot load this file as a GGUF model" not in err and "Traceback" not in err
